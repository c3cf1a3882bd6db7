"""Where the job's output goes: the events topic, the quarantine topic, and the history (Parquet).

Exactly-once by id: Spark re-runs the last micro-batch after a crash, and the detection is deterministic, so a
replayed batch yields the same events with the same ids. The events publisher remembers the ids it wrote (and,
at start, reads back the newest records of the events topic), so a replayed event is not written twice. History
files are named after the micro-batch, so a replayed batch overwrites its own files.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from replmon.core import locations
from replmon.core.config import ReplmonConfig
from replmon.core.errors import ReplmonError
from replmon.core.kafka_topics import ensure_topic
from streaming.event_writer import BATCH_HEADER, PRODUCER_SETTINGS, READ_BACK_TIMEOUT_S, keys_to_end
from streaming.schema import QUARANTINE_VALUE_MAX_CHARS
from streaming.storage import HadoopDirectory

log = logging.getLogger(__name__)

RECENT_IDS = 200_000
"""Event ids remembered for de-duplication (far more than one micro-batch can hold)."""
READ_BACK_PER_PARTITION = 20_000


class RecentIds:
    """A bounded, insertion-ordered set."""

    def __init__(self, capacity: int = RECENT_IDS) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, event_id: str) -> None:
        self._ids[event_id] = None
        self._ids.move_to_end(event_id)
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)


def read_back_ids(config: ReplmonConfig, topic: str, per_partition: int = READ_BACK_PER_PARTITION) -> list[str]:
    """Keys (event ids) of the newest records of ``topic``: what a previous run of the job already wrote."""
    consumer = KafkaConsumer(bootstrap_servers=config.samples_bootstrap(), enable_auto_commit=False,
                             group_id=None, consumer_timeout_ms=2000, isolation_level="read_committed",
                             client_id="replmon-events-readback", **config.samples_security().kafka_python())
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        first = consumer.beginning_offsets(parts) if parts else {}
        try:
            return keys_to_end(consumer, parts, lambda tp, end: max(first[tp], end - per_partition))
        except TimeoutError as exc:
            raise ReplmonError(f"could not read back the event ids of {topic} within {READ_BACK_TIMEOUT_S:.0f} s: "
                               "events of a replayed batch would be written twice") from exc
    finally:
        consumer.close()


def quarantine_record(reason: str, partition: int, offset: int, raw: str | None, raw_chars: int | None = None,
                      max_chars: int = QUARANTINE_VALUE_MAX_CHARS) -> bytes:
    """The quarantine topic's record of one bad sample: why, where it came from, and its value (cut to
    ``max_chars``, then ``value_chars`` tells the full length: ``raw_chars`` when it was cut where it was read,
    :data:`streaming.parse.QUARANTINE_FIELDS`). The cut keeps a sample near the samples topic's max.message.bytes
    from making a quarantine record beyond the producer's or the topic's limit."""
    chars = raw_chars if raw_chars is not None or raw is None else len(raw)
    value = raw if raw is None else raw[:max_chars]
    record: dict[str, Any] = {"reason": reason, "source_partition": partition, "source_offset": offset,
                              "value": value}
    if chars is not None and value is not None and chars > len(value):
        record["value_truncated"] = True
        record["value_chars"] = chars
    return json.dumps(record).encode()


class EventBatches:
    """Where each micro-batch's events began to go out: the events topic's end offsets when its first run began, a
    file per micro-batch beside the checkpoint (``<query>-events/<batch id>``, through the session's Hadoop
    filesystem). A micro-batch that finds its file runs again: its tasks read back from there what they wrote
    (:mod:`streaming.event_writer`). A micro-batch starts only after the one before it committed: the older files
    go.

    A state query that replaces another (a new state parallelism, :mod:`streaming.reshard`) starts where the old
    one last committed: its first micro-batch may hold the events of the old one's micro-batch that never
    committed, so it reads back from where that one's events began (``replaced``: the old query and its last
    committed micro-batch).

    A query past its first micro-batch with no such file either has a checkpoint of a version of replmon that kept
    none (its driver wrote the events and read back the newest ids at its start) or meets its first events now:
    the micro-batch reads back as much as that version did (:data:`READ_BACK_PER_PARTITION` of each partition),
    once in the query's life (a file stays from then on)."""

    def __init__(self, spark: SparkSession, checkpoint_dir: str, query: str,
                 replaced: tuple[str, int] | None = None) -> None:
        self.directory = HadoopDirectory(spark, locations.join(checkpoint_dir, f"{query}-events"))
        self.replaced = (None if replaced is None else
                         (HadoopDirectory(spark, locations.join(checkpoint_dir, f"{replaced[0]}-events")),
                          replaced[1]))

    def begin(self, batch_id: int, end: Callable[[], dict[int, int]]) -> tuple[dict[int, int], bool]:
        """Where the micro-batch's events began (``end()``, recorded now, on its first run) and whether they may
        have gone out before."""
        names = self.directory.list()
        if str(batch_id) in names:
            return self._read(self.directory, str(batch_id)), True
        for name in names:
            if name.isdigit() and int(name) < batch_id:
                self.directory.delete(name)
        since = end()
        again = False
        if batch_id > 0 and not any(name.isdigit() for name in names):
            # maybe a checkpoint of a version that kept no such files (its driver wrote the events): the
            # micro-batch may be one that version ran and never committed, so read back what it read back at its
            # start, the newest READ_BACK_PER_PARTITION records of each partition
            since, again = {p: max(0, o - READ_BACK_PER_PARTITION) for p, o in since.items()}, True
        if self.replaced is not None:
            old, committed = self.replaced
            self.replaced = None  # the first micro-batch with events only
            uncommitted = [int(n) for n in old.list() if n.isdigit() and int(n) > committed]
            if uncommitted:
                since, again = self._read(old, str(min(uncommitted))), True
        self.directory.create(str(batch_id), json.dumps(since).encode())
        return since, again

    @staticmethod
    def _read(directory: HadoopDirectory, name: str) -> dict[int, int]:
        return {int(p): int(o) for p, o in json.loads(directory.read_bytes(name) or b"{}").items()}


class EventsPublisher:
    """Writes events (JSON, keyed by event id) to the events topic, each id once."""

    def __init__(self, config: ReplmonConfig) -> None:
        self.topic = config.transport.events_topic
        ensure_topic(config, self.topic)
        ensure_topic(config, config.transport.quarantine_topic)
        self.quarantine_topic = config.transport.quarantine_topic
        self.recent = RecentIds()
        for event_id in read_back_ids(config, self.topic):
            self.recent.add(event_id)
        self.producer = KafkaProducer(bootstrap_servers=config.samples_bootstrap(), **PRODUCER_SETTINGS,
                                      **config.samples_security().kafka_python())
        self.bootstrap = config.samples_bootstrap()
        self.client = config.samples_security().kafka_python()
        self._end_consumer: KafkaConsumer | None = None

    def publish(self, events: Iterable[tuple[str, str]], batch_id: int) -> list[str]:
        """Write ``(event_id, payload)`` pairs not written before; wait for the acknowledgements. Returns the
        payloads written now (the ones to count)."""
        written = []
        futures = []
        for event_id, payload in events:
            if event_id in self.recent:
                continue
            futures.append(self.producer.send(self.topic, key=event_id.encode(), value=payload.encode(),
                                              headers=[(BATCH_HEADER, str(batch_id).encode())]))
            written.append((event_id, payload))
        self.producer.flush()
        for future in futures:
            future.get(timeout=30)  # raises: the batch fails and Spark retries it
        for event_id, _ in written:
            self.recent.add(event_id)
        return [payload for _, payload in written]

    def end_offsets(self) -> dict[int, int]:
        """The events topic's end, per partition. One consumer for the publisher's life: a new one per micro-batch
        (connection, metadata) cost ~0.12 s of each micro-batch with events (docs/benchmarks.md, "Streaming job");
        one that failed is closed, and the next call connects again."""
        if self._end_consumer is None:
            self._end_consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                               group_id=None, client_id="replmon-events-end", **self.client)
        consumer = self._end_consumer
        try:
            parts = [TopicPartition(self.topic, p) for p in sorted(consumer.partitions_for_topic(self.topic) or ())]
            return {tp.partition: int(offset) for tp, offset in consumer.end_offsets(parts).items()}
        except Exception:
            self._end_consumer = None
            with contextlib.suppress(Exception):
                consumer.close()
            raise

    def publish_from_executors(self, events: DataFrame, batch_id: int, since: dict[int, int], again: bool
                               ) -> Counter[tuple[str, tuple[str, ...]]]:
        """Write ``events`` (the micro-batch's event rows, on the executors: :mod:`streaming.event_writer`), each id
        once; ``since``: the topic's end when the micro-batch's first run began, ``again``: this is not that run.
        Returns what the events written now add to the counters."""
        from streaming.event_writer import COUNTS, EventTarget, portable, write_events

        target = EventTarget(self.bootstrap, self.topic, portable(self.client), batch_id, since, again)
        counts: Counter[tuple[str, tuple[str, ...]]] = Counter()
        for row in events.select("event_id", "payload").mapInArrow(
                functools.partial(write_events, target), from_arrow_schema(COUNTS)).collect():
            counts[(row["name"], tuple(json.loads(row["labels"])))] += int(row["amount"])
        return counts

    def quarantine(self, records: pd.DataFrame) -> None:
        """Bad samples with their reason, for someone to look at (``records``: the columns of
        :data:`streaming.parse.QUARANTINE_FIELDS`); waits for the acknowledgements (a failure fails the batch,
        which Spark then retries)."""
        futures = [self.producer.send(self.quarantine_topic, key=row.key,
                                      value=quarantine_record(row.reason, int(row.partition), int(row.offset), row.raw,
                                                              None if pd.isna(row.raw_chars) else int(row.raw_chars)))
                   for row in records.itertuples(index=False)]
        self.producer.flush()
        for future in futures:
            future.get(timeout=30)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.producer.close(timeout=5)
        if self._end_consumer is not None:
            with contextlib.suppress(Exception):
                self._end_consumer.close()


DAY_MS = 86_400_000


def _arrow_schema(spark_struct: Any, drop: tuple[str, ...] = ()) -> pa.Schema:
    """The Arrow schema of a Spark StructType (itself derived from the pydantic records): every history file
    of a kind has the same schema, whatever values happened to be null in its batch."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(spark_struct)
    return pa.schema([f for f in schema if f.name not in drop])


class HistoryWriter:
    """Parquet history under ``stream.history_dir``: ``events/`` and ``partitions/``, partitioned by cluster
    and date (UTC). The partition snapshots are the rows the processor marked (``history``: a change of more than
    offsets, else once a minute; :func:`streaming.processor.history_due`), so the choice is the same wherever and
    however often a micro-batch runs.

    The partition snapshots and the events are written by Spark's Parquet writer straight from the micro-batch's
    output on the executors (they never pass through the driver), wherever the history is; a replayed batch
    appends its files again, and readers de-duplicate them (snapshots by partition and sample time, events by id:
    :func:`read_events`). The driver's few events (a silent cluster's partition STALE events merged into one,
    :meth:`write_events`) go into a local directory by Arrow, in files named after the micro-batch (a replayed batch
    overwrites its own), anywhere else (HDFS, an object store) by Spark's writer, which reaches it with the
    cluster's Hadoop configuration."""

    def __init__(self, location: str | Path, spark: SparkSession | None = None) -> None:
        from replmon.contracts.events import Event
        from streaming.processor import NOT_METRICS, OUTPUT_SCHEMA
        from streaming.schema import spark_schema

        self.location = locations.normalize(location)
        self.spark = spark
        self.distributed = not locations.is_local(self.location)
        """Events written by Spark's writer; else by Arrow on the driver."""
        if self.distributed and spark is None:
            raise ValueError(f"writing the history to {self.location} takes a Spark session")
        self.event_schema = _arrow_schema(spark_schema(Event))
        self.partition_schema = _arrow_schema(OUTPUT_SCHEMA, drop=NOT_METRICS)

    def _write(self, table: pa.Table, kind: str, batch_id: int, times_ms: list[int]) -> None:
        if table.num_rows == 0:
            return
        dates = [datetime.fromtimestamp(t / 1000, tz=UTC).strftime("%Y-%m-%d") for t in times_ms]
        table = table.append_column("date", pa.array(dates, pa.string()))
        target = locations.join(self.location, kind)
        if self.distributed:
            assert self.spark is not None
            frame = self.spark.createDataFrame(table)  # from Arrow, its schema kept
            frame.write.mode("append").partitionBy("cluster", "date").parquet(target)
            return
        pq.write_to_dataset(table, root_path=target, partition_cols=["cluster", "date"],
                            basename_template=f"batch-{batch_id:012d}-{{i}}.parquet",
                            existing_data_behavior="overwrite_or_ignore")

    def write_events(self, events: list[dict[str, Any]], batch_id: int) -> None:
        if events:
            table = pa.Table.from_pylist(events, schema=self.event_schema)
            self._write(table, "events", batch_id, [e["event_time_ms"] for e in events])

    def write_event_rows(self, events: DataFrame) -> None:
        """Events as the micro-batch's event rows hold them (their JSON ``payload``, on the executors), by Spark's
        Parquet writer, wherever the history is (appended; read de-duplicated by id)."""
        from pyspark.sql import functions as F

        from replmon.contracts.events import Event
        from streaming.schema import spark_schema

        parsed = events.select(F.from_json("payload", spark_schema(Event)).alias("e")).select("e.*")
        (parsed.select(*self.event_schema.names, _utc_date("event_time_ms").alias("date"))
         .write.mode("append").partitionBy("cluster", "date")
         .parquet(locations.spark_uri(locations.join(self.location, "events"))))

    def write_partitions(self, batch: DataFrame) -> None:
        """The snapshots among a micro-batch's output (``batch``, on the executors), by Spark's Parquet writer,
        wherever the history is: they never pass through the driver."""
        from pyspark.sql import functions as F

        from streaming.processor import KIND_PARTITION

        chosen = batch.filter((F.col("kind") == KIND_PARTITION) & F.col("history"))
        (chosen.select(*self.partition_schema.names, _utc_date("sample_time_ms").alias("date"))
         .write.mode("append").partitionBy("cluster", "date")
         .parquet(locations.spark_uri(locations.join(self.location, "partitions"))))


def _utc_date(column: str) -> Any:
    """The UTC date (``YYYY-MM-DD``) of a time in ms, whatever the session's time zone."""
    from pyspark.sql import functions as F

    return F.date_add(F.lit("1970-01-01").cast("date"), F.floor(F.col(column) / DAY_MS).cast("int")).cast("string")


def read_events(location: str | Path, spark: SparkSession | None = None) -> pd.DataFrame:
    """Every event in the history, de-duplicated by id, oldest first. A history that is not a local directory is
    read through ``spark`` (its Hadoop filesystems)."""
    from replmon.contracts.events import Event
    from streaming.schema import spark_schema

    location = locations.normalize(location)
    # the contract's schema, not the first file's: files written before a field was added read with it null
    schema = _arrow_schema(spark_schema(Event)).append(pa.field("date", pa.string()))
    path = locations.join(location, "events")
    if not locations.is_local(location):
        if spark is None:
            raise ValueError(f"reading the history in {location} takes a Spark session")
        if not HadoopDirectory(spark, location).is_dir("events"):
            return pd.DataFrame()
        frame: pd.DataFrame = spark.read.schema(from_arrow_schema(schema)).parquet(path).toPandas()
    elif not Path(path).exists():
        return pd.DataFrame()
    else:
        frame = pq.read_table(path, schema=schema, partitioning="hive").to_pandas()
    if frame.empty:
        return frame
    return frame.drop_duplicates("event_id").sort_values("event_time_ms", kind="stable").reset_index(drop=True)
