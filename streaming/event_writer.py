"""Events written by the executors: each task writes its share of a micro-batch's events to the events topic, each
id once, and tells the driver what they add to the counters.

A task's first run writes its events (idempotent producer, acks=all). A task that may have written before, a retry
of the task (Spark runs a failed task again: an executor lost mid-write) or any task of a micro-batch that runs
again (the job stopped or failed after its events began to go out), first reads back the ids the topic holds since
its first run began (where, the driver recorded beside the checkpoint: :class:`streaming.sinks.EventBatches`) and
writes only the ids not there. The records carry their micro-batch's id in a header, for whoever reads them.
The counts are those of the events written now: a run again counts none twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from kafka import KafkaProducer

from streaming.serving import event_counts

BATCH_HEADER = "replmon-batch"
"""The header that carries an event record's micro-batch id."""
COUNTS = pa.schema([("name", pa.string()), ("labels", pa.string()), ("amount", pa.int64())])
"""The rows a task gives back: what its written events add to each counter (labels as a JSON list)."""
PEM_SETTINGS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
PRODUCER_SETTINGS: dict[str, Any] = {"acks": "all", "enable_idempotence": True, "linger_ms": 20,
                                     "compression_type": "zstd", "client_id": "replmon-job-events"}
"""The events producer's settings (kafka-python), the driver's and the executors' alike."""
READ_BACK_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class EventTarget:
    """Where and how a task writes (picklable: it travels to the executors)."""

    bootstrap: list[str]
    topic: str
    client: dict[str, Any]
    """kafka-python settings; a PEM file's setting holds its contents (:func:`portable`): the executors have
    none of the driver's files."""
    batch_id: int
    since: dict[int, int] = field(default_factory=dict)
    """Per partition of the topic, its end when the micro-batch's first run began."""
    again: bool = False
    """The micro-batch runs again: every task reads back first."""


def portable(client: dict[str, Any]) -> dict[str, Any]:
    """kafka-python settings with each PEM file's path replaced by its contents."""
    out = dict(client)
    for name in PEM_SETTINGS:
        if out.get(name):
            with open(out[name]) as f:
                out[name] = {"pem": f.read()}
    return out


def _materialised(client: dict[str, Any], directory: str) -> dict[str, Any]:
    """The settings with each PEM's contents in a private file again (on the executor)."""
    out = dict(client)
    for name in PEM_SETTINGS:
        value = out.get(name)
        if isinstance(value, dict):
            path = os.path.join(directory, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(value["pem"])
            out[name] = path
    return out


def written_ids(target: EventTarget, client: dict[str, Any]) -> set[str]:
    """The event ids the topic holds since ``target.since`` (an id is one event, whichever micro-batch wrote it:
    after a new state parallelism, another query's)."""
    from kafka import KafkaConsumer, TopicPartition

    # a ``since`` below the log's start (the retention took it) reads from the log's first record
    consumer = KafkaConsumer(bootstrap_servers=target.bootstrap, enable_auto_commit=False, group_id=None,
                             isolation_level="read_committed", client_id="replmon-events-read-back",
                             auto_offset_reset="earliest", **client)
    try:
        parts = [TopicPartition(target.topic, p) for p in sorted(consumer.partitions_for_topic(target.topic) or ())]
        return set(keys_to_end(consumer, parts, lambda tp, _end: target.since.get(tp.partition, 0)))
    finally:
        consumer.close()


def keys_to_end(consumer: Any, parts: list[Any], start: Callable[[Any, int], int]) -> list[str]:
    """The keys of ``parts``' records (kafka-python TopicPartitions, assigned to ``consumer`` here) from
    ``start(part, its end offset)`` to the end each had at the call. Raises TimeoutError after
    :data:`READ_BACK_TIMEOUT_S`: an empty poll is not the end (a loaded cluster answers the first fetch late)."""
    import time

    if not parts:
        return []
    consumer.assign(parts)
    end = consumer.end_offsets(parts)
    for tp in parts:
        consumer.seek(tp, start(tp, end[tp]))
    keys: list[str] = []
    deadline = time.monotonic() + READ_BACK_TIMEOUT_S
    while any(consumer.position(tp) < end[tp] for tp in parts):
        if time.monotonic() > deadline:
            raise TimeoutError(f"could not read back {parts[0].topic} within {READ_BACK_TIMEOUT_S:.0f} s")
        for records in consumer.poll(timeout_ms=1000).values():
            keys.extend(r.key.decode() for r in records if r.key)
    return keys


@dataclass
class _Writer:
    """A Python worker's producer, kept between its tasks (Spark reuses its Python workers), with the settings it
    was made with (PEMs in its private temporary directory, removed with it)."""

    key: str
    producer: KafkaProducer
    client: dict[str, Any]
    directory: tempfile.TemporaryDirectory[str]

    def close(self) -> None:
        try:
            self.producer.close(timeout=5)
        finally:
            self.directory.cleanup()


_WRITER: list[_Writer] = []
"""This worker's producer, if it made one (a list of at most one: no global statement)."""


def _writer(target: EventTarget) -> _Writer:
    """The producer for ``target``'s cluster and settings: this worker's, or a new one. A producer per task cost
    each task with events its connections and the idempotent producer's id (~0.1 s of every micro-batch with
    events: docs/benchmarks.md, "Streaming job")."""
    key = json.dumps([target.bootstrap, target.client], sort_keys=True)
    if _WRITER and _WRITER[0].key == key:
        return _WRITER[0]
    _drop_writer()
    directory = tempfile.TemporaryDirectory(prefix="replmon-events-")
    try:
        client = _materialised(target.client, directory.name)
        producer = KafkaProducer(bootstrap_servers=target.bootstrap, **PRODUCER_SETTINGS, **client)
    except BaseException:
        directory.cleanup()
        raise
    _WRITER.append(_Writer(key, producer, client, directory))
    return _WRITER[0]


def _drop_writer() -> None:
    while _WRITER:
        with contextlib.suppress(Exception):
            _WRITER.pop().close()


def write_events(target: EventTarget, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a micro-batch's event rows (``event_id``, ``payload``): this task's share written, each id
    once; yields what the events written now add to the counters (:data:`COUNTS`)."""
    from pyspark import TaskContext

    ids: list[str] = []
    payloads: list[str] = []
    for batch in batches:
        ids.extend(batch.column("event_id").to_pylist())
        payloads.extend(batch.column("payload").to_pylist())
    if not ids:
        return
    context = TaskContext.get()
    writer = _writer(target)
    skip = (written_ids(target, writer.client) if target.again or (context and context.attemptNumber() > 0)
            else set())
    headers = [(BATCH_HEADER, str(target.batch_id).encode())]
    sent = [(event_id, payload) for event_id, payload in zip(ids, payloads, strict=True) if event_id not in skip]
    try:
        futures = [writer.producer.send(target.topic, key=event_id.encode(), value=payload.encode(),
                                        headers=headers) for event_id, payload in sent]
        writer.producer.flush()
        for future in futures:
            future.get(timeout=30)  # raises: the task fails, and Spark runs it again
    except BaseException:
        _drop_writer()  # its state is unknown: the task's next run connects again
        raise
    counts = event_counts(json.loads(payload) for _, payload in sent)
    yield pa.RecordBatch.from_pydict({"name": [name for name, _ in counts],
                                      "labels": [json.dumps(list(labels)) for _, labels in counts],
                                      "amount": [int(amount) for amount in counts.values()]}, schema=COUNTS)
