"""The Spark Structured Streaming job: samples topic -> parse and validate -> bucketed state -> sinks.

One query, ``replmon-state``, reads the samples topic and parses each record once:

* valid samples, hashed into state buckets, go through :class:`streaming.processor.ReplicationProcessor`
  (transformWithStateInPandas, RocksDB state store, processing-time timers); its foreachBatch publishes events
  (once per id), updates the Prometheus table and writes the history;
* records that fail parsing or validation pass through the processor untouched, with their reason, to the
  quarantine topic and ``replmon_quarantined_samples_total{reason}``. The job never dies on bad input. (A second
  query for them read and parsed every record a second time, as much work as the whole stateless parse:
  docs/benchmarks.md, "Streaming job".)
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pyspark import SparkContext
from pyspark.errors import StreamingQueryException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener
from pyspark.sql.streaming.listener import QueryProgressEvent
from pyspark.sql.types import ArrayType, MapType, StringType

from replmon.contracts.samples import (
    PARTITION_SCHEMA,
    REPLICA_SCHEMA,
    SAMPLE_MODELS,
    CycleSample,
    PartitionSample,
    ReplicaSample,
)
from replmon.core.config import ReplmonConfig
from streaming import schema
from streaming.buckets import resolve_layout
from streaming.detect import DetectConfig
from streaming.exporter import JobExporter
from streaming.processor import (
    KIND_EVENT,
    KIND_PARTITION,
    KIND_QUARANTINE,
    OUTPUT_SCHEMA,
    PROCESSOR_INPUT,
    QUARANTINED,
    ReplicationProcessor,
)
from streaming.sinks import EventsPublisher, HistoryWriter

log = logging.getLogger(__name__)



SOURCE_FETCH_MAX_WAIT_MS = 20
"""The Kafka source's consumers read offset ranges known to exist, in tasks; with the consumer's default (500
ms) a fetch left in flight at the end of a range held the next read of that partition for up to 500 ms, and
every micro-batch's read stage took ~0.5 s longer (measured: 6 read tasks of 8-50 records, mostly 700-900 ms
-> 200-330 ms)."""


def kafka_source(spark: SparkSession, config: ReplmonConfig) -> DataFrame:
    stream = config.stream
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", ",".join(config.samples_bootstrap()))
              .option("subscribe", config.transport.samples_topic)
              .option("startingOffsets", stream.starting_offsets)
              .option("failOnDataLoss", "false")
              .option("kafka.fetch.max.wait.ms", str(SOURCE_FETCH_MAX_WAIT_MS)))
    for key, value in config.samples_security().java_client().items():
        reader = reader.option(f"kafka.{key}", value)
    if stream.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(stream.max_offsets_per_trigger))
    return reader.load()


SAMPLE_STRUCT = schema.union_struct(*SAMPLE_MODELS.values())
"""Every field of the three sample models: any record is parsed once, whatever its kind."""
TOP_LEVEL = ArrayType(MapType(StringType(), StringType())).simpleString()
"""A record wrapped in ``[...]``, parsed as a list of objects whose fields are raw JSON text (null for JSON
null): one parse tells every field's presence, and that the record is exactly one JSON object (Spark's parser
stops after the first value; inside brackets, anything after it breaks the array)."""
CANONICAL_JSON = {"ignoreNullFields": "false"}
"""Spark's to_json written like the collectors' pydantic ``to_json``: every field, nulls included."""

Model = type[PartitionSample] | type[ReplicaSample] | type[CycleSample]


def _violations(model: Model, parsed: Column, fields: Column | None) -> list[tuple[Column, str]]:
    """:func:`streaming.schema.violations`, with each field's raw JSON looked up in ``fields`` (the record parsed
    once as a map) instead of one ``get_json_object`` per field, each of which re-parses the whole record.
    Without ``fields`` (a record known to hold every field of the model, see :func:`_canonical`), a null field
    is a missing one."""
    out: list[tuple[Column, str]] = []
    for name, f in model.model_fields.items():
        key = schema.json_name(name, f)
        raw = fields[key] if fields is not None else None
        out += schema._field_violations(parsed[key], raw, schema._annotated(f), f.is_required(), key)
    return out


def _first_violation(model: Model, parsed: Column, fields: Column) -> Column:
    """The reason of the first failed check, else ``unknown_field:<name>`` for a field the model does not have
    (its models forbid extra fields), else null."""
    known = F.array(*[F.lit(schema.json_name(n, f)) for n, f in model.model_fields.items()])
    unknown = F.array_except(F.map_keys(fields), known)
    return F.coalesce(schema.first_violation(_violations(model, parsed, fields)),
                      F.when(F.size(unknown) > 0, F.concat(F.lit(f"{schema.UNKNOWN_FIELD}:"), F.array_min(unknown))))


def _as_model(sample: Column, model: Model) -> Column:
    """The union-parsed record as ``model``'s struct (its fields, in its order)."""
    return F.struct(*[sample[schema.json_name(n, f)].alias(schema.json_name(n, f)) for n, f in
                      model.model_fields.items()])


def _canonical(written: Column, raw: Column) -> Column:
    """The record is exactly what the collectors write (pydantic ``to_json``: compact, every field, nulls
    included), ``written`` being its parse written back: one JSON object, nothing after it, no field the model
    lacks, none missing. Such a record needs no map parse: the checks on the parse alone give its reason."""
    return written == raw


def _once(expression: Column) -> Column:
    """``expression``, made nondeterministic (spark_partition_id() is never negative, but the optimizer cannot
    know), so that it is evaluated once per row where it is projected. The filter on ``reason``
    (:func:`processor_input`) is otherwise pushed below the projections with the expressions it reads inlined:
    every reference to a parsed record replaced by its from_json, which parsed each record hundreds of times
    (~20x slower), and the ~2,800 expressions of ``reason`` itself, which Spark then generated Java code for a
    second time in every task (the checks of list items keep these projections out of whole-stage code
    generation; ~10% of the read stage's CPU: docs/benchmarks.md, "Streaming job")."""
    return F.when(F.spark_partition_id() >= 0, expression)


def parse_samples(raw: DataFrame, bucket_ids: Sequence[int]) -> DataFrame:
    """Kafka records -> one row per record: ``reason`` (null when valid), ``kind`` ('p', 'r', 'c'), the parsed
    samples ``p``/``r`` and, as the processor takes it, ``sample``: that parse written back as the collectors
    write it (compact JSON, nulls included; for a record written that way, the record itself), the state
    ``bucket`` (one of ``bucket_ids``: :mod:`streaming.buckets`), and what the quarantine needs (raw value, key,
    offset).

    Two paths, one verdict. Every record is parsed once (``SAMPLE_STRUCT``). A record written the way the
    collectors write (:func:`_canonical`) is judged by the checks on that parse alone; any other record (other
    formatting, a field missing or extra, trailing content, not JSON) is parsed a second time as a map of raw
    fields, which tells a missing field from one of the wrong type and finds extra fields
    (docs/benchmarks.md, "Streaming job": the second parse on every record halved the throughput)."""
    text = F.col("value").cast("string")
    # JSON is UTF-8: a record that is not goes to the quarantine with its bad bytes replaced (U+FFFD), and
    # nothing downstream ever sees an invalid string (Arrow refuses one, failing the whole micro-batch)
    value = F.make_valid_utf8(text)
    rows = raw.select(value.alias("raw"), F.col("key"), F.col("partition"), F.col("offset"),
                      _once(F.from_json(value, SAMPLE_STRUCT)).alias("u"), F.is_valid_utf8(text).alias("utf8"))
    name = F.col("u")["schema"]
    models = {s: F.when(name == s, _as_model(F.col("u"), m)) for s, m in SAMPLE_MODELS.items()}
    rows = rows.select("*", *[col.alias(f"m{i}") for i, col in enumerate(models.values())])
    parsed = {s: F.col(f"m{i}") for i, s in enumerate(models)}
    rows = rows.select("*", *[_once(F.to_json(parsed[s], CANONICAL_JSON)).alias(f"j{i}")
                              for i, s in enumerate(models)])
    written = {s: F.col(f"j{i}") for i, s in enumerate(models)}

    fast = F.col("utf8") & F.coalesce(*[
        F.when(name == s, _canonical(written[s], F.col("raw"))
               & schema.first_violation(_violations(m, parsed[s], None)).isNull())
        for s, m in SAMPLE_MODELS.items()], F.lit(False))
    rows = rows.select("*", _once(fast).alias("fast"))
    wrapped = F.from_json(F.concat(F.lit("["), F.col("raw"), F.lit("]")), TOP_LEVEL)
    rows = rows.select("*", _once(F.when(~F.col("fast"), wrapped)).alias("wrapped"))
    fields = F.when(F.size(F.col("wrapped")) == 1, F.col("wrapped")[0])
    slow_name = fields["schema"]
    slow: Column = (
        F.when(F.col("raw").isNull(), F.lit(schema.MALFORMED_JSON))
        .when(~F.col("utf8"), F.lit(schema.INVALID_UTF8))
        .when(fields.isNull(), F.lit(schema.MALFORMED_JSON))
        .when(slow_name.isNull() | ~slow_name.isin(*SAMPLE_MODELS), F.lit(schema.UNKNOWN_SCHEMA))
    )
    for s, m in SAMPLE_MODELS.items():
        slow = slow.when(slow_name == s, _first_violation(m, parsed[s], fields))
    reason = F.when(F.col("fast"), F.lit(None).cast("string")).otherwise(slow)
    kind = (F.when(name == PARTITION_SCHEMA, F.lit("p"))
            .when(name == REPLICA_SCHEMA, F.lit("r")).otherwise(F.lit("c")))

    def either(field_name: str) -> Column:
        return F.when(name.isin(PARTITION_SCHEMA, REPLICA_SCHEMA), F.col("u")[field_name])

    key = F.concat_ws("/", either("cluster"), either("topic"), either("partition").cast("string"))
    return rows.select(
        "raw", "key", "partition", "offset", parsed[PARTITION_SCHEMA].alias("p"),
        parsed[REPLICA_SCHEMA].alias("r"),
        F.coalesce(written[PARTITION_SCHEMA], written[REPLICA_SCHEMA]).alias("sample"),
        _once(reason).alias("reason"), kind.alias("kind"),
        F.element_at(F.array(*map(F.lit, bucket_ids)),
                     (F.pmod(F.xxhash64(key), F.lit(len(bucket_ids))) + 1).cast("int")).alias("bucket"),
        either("sample_time_ms").alias("sample_time_ms"), either("cycle").alias("cycle"),
    )


QUARANTINE_FIELDS = ("reason", "partition", "offset", "raw", "key")
"""What the quarantine keeps of a bad record, carried through the processor as JSON (``key`` in base64)."""


def processor_input(parsed: DataFrame) -> DataFrame:
    """The rows of :func:`parse_samples` the processor takes, in its columns: valid partition and replica
    samples, and every bad record as kind :data:`~streaming.processor.QUARANTINED` with its quarantine fields
    as ``sample``. (A valid cycle sample is neither: nothing downstream reads it.)"""
    bad = F.col("reason").isNotNull()
    quarantined = F.to_json(F.struct(*QUARANTINE_FIELDS[:-1], F.base64("key").alias("key")), CANONICAL_JSON)
    return (parsed.filter(bad | F.col("kind").isin("p", "r"))
            .withColumns({"kind": F.when(bad, F.lit(QUARANTINED)).otherwise(F.col("kind")),
                          "sample": F.when(bad, quarantined).otherwise(F.col("sample"))})
            .select(*PROCESSOR_INPUT))


def quarantined_records(payloads: list[str]) -> pd.DataFrame:
    """The processor's KIND_QUARANTINE payloads back as the quarantine's columns (``key`` as bytes)."""
    bad = pd.DataFrame([json.loads(p) for p in payloads], columns=list(QUARANTINE_FIELDS))
    bad["key"] = [None if k is None else base64.b64decode(k) for k in bad["key"]]
    return bad


@dataclass
class JobStats:
    """What the driver saw, for tests and benchmarks."""

    batches: int = 0
    samples: int = 0
    events: int = 0
    delays_s: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class StateBatchHandler:
    """foreachBatch of the state query: one collect, then events, metrics and history from the driver."""

    def __init__(self, config: ReplmonConfig, exporter: JobExporter, stats: JobStats, gate: BatchGate) -> None:
        self.exporter = exporter
        self.stats = stats
        self.gate = gate
        self.events = EventsPublisher(config)
        self.history = HistoryWriter(config.stream.history_dir)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        with self.gate.batch(batch_id):
            self.handle(batch, batch_id)

    def handle(self, batch: DataFrame, batch_id: int) -> None:
        out: pd.DataFrame = batch.toPandas()
        quarantined = out["kind"] == KIND_QUARANTINE
        if quarantined.any():
            self.quarantine(out.loc[quarantined, "payload"].tolist())
        events = out[out["kind"] == KIND_EVENT]
        # a partition row has both; other rows' nulls make the columns float (a label partition="0.0")
        partitions = out[out["kind"] == KIND_PARTITION].astype({"partition": "int64", "sample_time_ms": "int64"})
        written = self.events.publish(zip(events["event_id"], events["payload"], strict=True), batch_id)
        decoded = [json.loads(p) for p in written]
        self.exporter.count_events(decoded)
        if not partitions.empty:
            self.exporter.update_partitions(partitions.drop(columns=["kind", "event_id", "event_type", "payload"]))
        all_events = [json.loads(p) for p in events["payload"]]
        self.history.write_events(all_events, batch_id)
        self.history.write_partitions(partitions, batch_id)
        now = time.time()
        self.exporter.count("replmon_job_batches_total", ())
        self.exporter.set_job("replmon_job_last_batch_timestamp_seconds", now)
        with self.stats.lock:
            self.stats.batches += 1
            self.stats.events += len(decoded)
            if not partitions.empty:
                newest = float(partitions["sample_time_ms"].max()) / 1000
                self.stats.delays_s.append(now - newest)
                self.exporter.set_job("replmon_job_sample_to_metric_delay_seconds", now - newest)

    def quarantine(self, payloads: list[str]) -> None:
        """The batch's bad records to the quarantine topic, counted by the kind of their reason."""
        bad = quarantined_records(payloads)
        self.events.quarantine(bad)
        for reason, count in bad["reason"].map(lambda r: r.split(":", 1)[0]).value_counts().items():
            self.exporter.count("replmon_quarantined_samples_total", (str(reason),), int(count))


class JsonProgressListener(StreamingQueryListener):
    """A listener of query progress (the other events are not read), each event crossing Py4J once, as the JSON
    Spark writes of it (:class:`JsonProgressEvents`). Subclasses define ``onQueryProgress``.

    PySpark's own listener reads an event field by field over Py4J, each Java collection to its end. The end of a
    Java iterator is an exception, and PySpark tests each one against 14 exception classes, in 3 Py4J lookups
    apiece; two of them are package names, so the JVM searches every jar on its class path for a class of that
    name. That was ~500 Py4J commands per progress event (scratch count on a stateful query; see
    docs/benchmarks.md), on every micro-batch of every query in the session."""

    @property
    def _jlistener(self) -> Any:  # what StreamingQueryManager.addListener registers with the JVM
        if not hasattr(self, "_json_jlistener"):
            jvm = SparkContext._jvm
            assert jvm is not None, "a listener is added to the streams of a running session"
            self._json_jlistener = jvm.PythonStreamingQueryListenerWrapper(JsonProgressEvents(self))
        return self._json_jlistener

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


class JsonProgressEvents:
    """The JVM's side of a :class:`JsonProgressListener` (a Py4J callback of Spark's PythonStreamingQueryListener): a
    progress event reaches it as one ``json()`` call, parsed by PySpark's own ``QueryProgressEvent.fromJson``
    (Spark Connect's path)."""

    def __init__(self, listener: StreamingQueryListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        self.listener.onQueryProgress(QueryProgressEvent.fromJson(json.loads(jevent.json())))

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class ProgressListener(JsonProgressListener):
    """The job's own health, from Spark's progress of the state query."""

    def __init__(self, exporter: JobExporter) -> None:
        self.exporter = exporter

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if progress.name != "replmon-state":
            return
        self.exporter.set_job("replmon_job_batch_duration_seconds", progress.batchDuration / 1000.0)
        self.exporter.set_job("replmon_job_input_rows_per_second", float(progress.inputRowsPerSecond or 0))
        self.exporter.set_job("replmon_job_processed_rows_per_second", float(progress.processedRowsPerSecond or 0))
        rows = sum(op.numRowsTotal for op in progress.stateOperators)
        self.exporter.set_job("replmon_job_state_rows", float(rows))


STOP_BATCH_WAIT_S = 10.0
"""How long stopping the job waits for the micro-batch in flight (``replmon run`` gives the job 15 s before a
SIGKILL)."""
STOP_POLL_S = 0.02


class BatchStopped(Exception):
    """A micro-batch's foreachBatch failed because the job was being stopped (its Spark job cancelled or its call
    interrupted): the failure again, in a text Spark's check of it can read (:class:`BatchGate`).

    The text is the error's first line and the Java exceptions behind it, one line each, without PySpark's
    Python traceback and Java stack traces: their length sends the check's regex into a StackOverflowError.
    From these lines Spark tells an interruption by the stop (the cancelled job group, or an
    InterruptedException behind a Py4JJavaError) from a failure, and ends the query as stopped."""

    def __init__(self, batch_id: int, error: BaseException) -> None:
        super().__init__(f"micro-batch {batch_id} stopped: " + " <- ".join(error_lines(error)))


def error_lines(error: BaseException) -> list[str]:
    """A PySpark error as ``module.Type: first line``, then the Java exceptions behind it (a Py4JJavaError's
    ``java_exception``, a captured exception's origin), outermost first, each its ``toString()`` on one line."""
    kind = type(error)
    lines = [f"{kind.__module__}.{kind.__qualname__}: {(str(error).splitlines() or [''])[0]}"]
    throwable = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    while throwable is not None and len(lines) <= 10:
        lines.append(" ".join(str(throwable.toString()).split()))
        throwable = throwable.getCause()
    return lines


class BatchGate:
    """Which foreachBatch call is in flight, so that the job stops between two micro-batches.

    Stopping a query interrupts the micro-batch it runs. The batch is replayed on restart (deterministic event ids:
    nothing lost or counted twice), but an interrupted foreachBatch fails with a Py4J error whose text Spark
    matches against a regex to tell an interruption from a failure (SPARK-39218), and on PySpark's long error
    text that regex overflows the stack: a StackOverflowError in the log at every stop. Between batches, a stop
    interrupts only Spark's own planning or waiting.

    When a stop has to interrupt a batch after all (it ran past the wait, or the next one started just before the
    stop), the batch's error is raised again as :class:`BatchStopped`, a few lines long: Spark recognises the
    interruption in it and ends the query as stopped, without the regex's overflow; the batch, not committed, is
    replayed on restart."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: int | None = None
        self._last = -1
        self._stopping = False

    @contextlib.contextmanager
    def batch(self, batch_id: int) -> Iterator[None]:
        """Wraps one foreachBatch call."""
        with self._lock:
            self._running = batch_id
        try:
            yield
        except Exception as exc:
            if self._stopping:  # the stop cancelled the batch's Spark job: it is replayed on restart
                raise BatchStopped(batch_id, exc) from None
            raise
        finally:
            with self._lock:
                self._running, self._last = None, max(self._last, batch_id)

    def stopping(self) -> None:
        """The queries are being stopped: a batch that fails from now on was interrupted by the stop."""
        self._stopping = True

    def between_batches(self, query: StreamingQuery) -> bool:
        """No foreachBatch call in flight, and the last one's micro-batch finished (its progress reported, after
        its commit)."""
        with self._lock:
            running, last = self._running, self._last
        if running is not None:
            return False
        if last < 0:
            return True
        # the id only, from the JVM's progress object: PySpark's lastProgress rebuilds the whole progress over
        # Py4J (~650 commands), at every poll of a stop
        progress = query._jsq.lastProgress()
        return progress is not None and progress.batchId() >= last


@dataclass
class RunningJob:
    spark: SparkSession
    queries: list[StreamingQuery]
    exporter: JobExporter
    stats: JobStats
    port: int
    gate: BatchGate = field(default_factory=BatchGate)
    """The foreachBatch handler's (every query's handler wraps its calls in it)."""

    def stop(self, batch_wait_s: float = STOP_BATCH_WAIT_S) -> None:
        """Stop every query between two micro-batches (:class:`BatchGate`): the one in flight is let finish (its
        events published, its commit written) for up to ``batch_wait_s``, and only then interrupted."""
        deadline = time.monotonic() + batch_wait_s
        for query in self.queries:
            try:
                while (query.isActive and not self.gate.between_batches(query)
                       and time.monotonic() < deadline):
                    time.sleep(STOP_POLL_S)
                self.gate.stopping()
                query.stop()
            except Exception as exc:  # stopping is best effort
                log.warning("stopping %s: %s", query.name, exc)

    def await_any(self, timeout_s: float | None = None) -> None:
        """Block until a query ends (raises its error)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while deadline is None or time.monotonic() < deadline:
            for query in self.queries:
                if not query.isActive:
                    exc = query.exception()
                    if exc is not None:
                        raise RuntimeError(f"query {query.name} failed: {exc}")
                    return
            try:
                self.spark.streams.awaitAnyTermination(timeout=1)
            except StreamingQueryException:
                # a query failed: the loop above raises its error (the caller restarts it); forget the failure so
                # that the restarted queries are awaited, not the old one again
                self.spark.streams.resetTerminated()


def start_job(spark: SparkSession, config: ReplmonConfig, exporter: JobExporter | None = None) -> RunningJob:
    stream = config.stream
    exporter = exporter or JobExporter(stream.series_budget)
    checkpoint = stream.checkpoint_dir
    query_checkpoint = checkpoint / "state"
    layout = resolve_layout(spark, checkpoint, stream.state_buckets,
                            query_started=(query_checkpoint / "offsets").is_dir())
    port = exporter.serve(stream.metrics_host, stream.metrics_port)
    stats = JobStats()
    spark.streams.addListener(ProgressListener(exporter))
    parsed = parse_samples(kafka_source(spark, config), layout.bucket_ids)
    gate = BatchGate()
    state_handler = StateBatchHandler(config, exporter, stats, gate)
    processed = (processor_input(parsed)
                 .groupBy("bucket")
                 .transformWithStateInPandas(statefulProcessor=ReplicationProcessor(DetectConfig.from_stream_config(
                     stream)), outputStructType=OUTPUT_SCHEMA, outputMode="Append", timeMode="ProcessingTime"))
    trigger = f"{stream.trigger_interval_s} seconds"
    state_query = (processed.writeStream.queryName("replmon-state").foreachBatch(state_handler)
                   .option("checkpointLocation", str(query_checkpoint)).trigger(processingTime=trigger).start())
    return RunningJob(spark, [state_query], exporter, stats, port, gate)
