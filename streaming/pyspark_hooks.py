"""Every use of PySpark's private API, in one place, behind a check of the PySpark version it was written against.

The job runs on the public API alone; these private hooks make it cheaper, each measured (docs/benchmarks.md,
"Streaming job"):

* :class:`JsonProgressListener`: a progress listener whose events cross Py4J once, as their JSON (it replaces
  ``StreamingQueryListener._jlistener``, what ``addListener`` registers with the JVM);
* :func:`last_batch_id`: a query's last micro-batch id from the JVM's progress object (``StreamingQuery._jsq``),
  not PySpark's ``lastProgress``, which rebuilds the whole progress over Py4J;
* :func:`quiet_stop_noise`: Spark's loggers that call a deliberate stop a failure, turned off as the job stops;
* :func:`daemon_conf`: the Python workers' daemon, ``streaming.worker_daemon``, which wraps ``pyspark.daemon``'s
  ``worker`` and turns off imports from zip archives;
* :func:`arrow_output`: the state processor's output handed to PySpark's serializer as the Arrow batch it already
  is (``TransformWithStateInPandasSerializer._create_struct_array``), not as pandas that PySpark converts back.
* :func:`error_lines`: a PySpark error's Java exceptions, from a Py4JJavaError's ``java_exception`` or a
  captured exception's ``_origin`` (neither there: the error's own first line alone).
* :class:`JvmShutdown`: a hook in the driver JVM's shutdown that stops the job between two micro-batches first
  (``SparkContext._jvm``, ``_gateway`` and its callback server).

They hold for the PySpark version ``pyproject.toml`` pins (:data:`PINNED_PYSPARK`). On any other version each
falls back to the public way, with one warning: the job keeps working, at the public API's cost, rather than
meet a private name that moved.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from typing import Any

import pandas as pd
import pyarrow as pa
import pyspark
from pyspark import SparkContext
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener
from pyspark.sql.streaming.listener import QueryProgressEvent

log = logging.getLogger(__name__)

PINNED_PYSPARK = "4.0.0"
"""The PySpark version the hooks are written against: the one pyproject.toml pins (a test keeps them equal)."""
PYSPARK_VERSION: str = pyspark.__version__
"""The PySpark version running."""


@functools.cache
def enabled() -> bool:
    """Whether the private hooks are on: the running PySpark is the pinned one (else one warning)."""
    if PYSPARK_VERSION == PINNED_PYSPARK:
        return True
    log.warning("PySpark %s is not the version replmon's private PySpark hooks were written for (%s): using "
                "PySpark's public API instead (slower progress listener and stop, Spark's own Python daemon)",
                PYSPARK_VERSION, PINNED_PYSPARK)
    return False


def daemon_conf() -> dict[str, str]:
    """The Python workers' daemon setting: the job's own daemon module when the hooks are on, else none."""
    return {"spark.python.daemon.module": "streaming.worker_daemon"} if enabled() else {}


STOP_NOISE_LOGGERS = ("org.apache.spark.broadcast.TorrentBroadcast", "org.apache.spark.scheduler.DAGScheduler",
                      "org.apache.spark.storage.BlockManager", "org.apache.spark.TaskContextImpl",
                      "org.apache.spark.executor.Executor",
                      "org.apache.spark.sql.execution.datasources.FileFormatWriter", "org.apache.hadoop.util.Shell")
"""The loggers that report a micro-batch interrupted by a deliberate stop as a failure: Spark's ("Store broadcast
... fail", "Failed to cancel job group"; for the tasks of a batch that ran past the stop's wait, a slow first
micro-batch for one: "Putting block ... failed due to exception TaskKilledException", "Error in
TaskCompletionListener ... Block broadcast_N does not exist", "Exception in task" when the stop removed what a
task still reads; "Aborting job" with the stack trace of its cancelled Spark job when the stop lands in the
history's Parquet writes, which the batch's replay writes again), and Hadoop's Shell, which warns with a stack
trace when the stop interrupts the ``chmod`` it forks for each checkpoint file the next micro-batch creates on a
local disk (without Hadoop's native library; a batch that falls behind its trigger starts the next at once, so a
stop can land there).
The stop of a job is not an error."""


def quiet_stop_noise() -> None:
    """Turn off :data:`STOP_NOISE_LOGGERS` in the driver's JVM (log4j's Configurator), for a job that is stopping;
    nothing without the hooks or without a running JVM."""
    jvm = SparkContext._jvm
    if not enabled() or jvm is None:
        return
    level = jvm.org.apache.logging.log4j.Level.OFF
    for name in STOP_NOISE_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)


def last_batch_id(query: StreamingQuery) -> int | None:
    """The id of ``query``'s last micro-batch with a progress report, None before the first."""
    if enabled():
        progress = query._jsq.lastProgress()
        return None if progress is None else int(progress.batchId())
    public = query.lastProgress
    return None if public is None else int(public.batchId)


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
        if not enabled():
            return super()._jlistener  # PySpark's own, field by field
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


ARROW_OUTPUT = "replmon.arrow_output"
"""The key, in a yielded frame's ``attrs``, of the Arrow batch it stands for (:func:`arrow_output`)."""


def arrow_output(batch: pa.RecordBatch) -> pd.DataFrame:
    """What a transformWithStateInPandas processor yields for ``batch``, its rows in the output schema.

    PySpark's public path takes a pandas frame and converts it to Arrow column by column; every map and list column
    goes through a Python function per row (``_create_converter_from_pandas``, then ``Array.from_pandas``): ~12 µs
    per row of the processor's output, more than its detection (docs/benchmarks.md, "Python workers"). With the
    hooks on, the frame is an empty one of the batch's length that carries the batch, and the serializer's hook
    (:func:`install_arrow_output`) hands the batch's columns to the JVM as they are. Otherwise the batch as pandas
    (integers with nulls as Python ints, maps as dicts), for PySpark's own conversion."""
    if install_arrow_output():
        frame = pd.DataFrame(index=pd.RangeIndex(batch.num_rows))
        frame.attrs[ARROW_OUTPUT] = batch
        return frame
    return as_pandas(batch)


def as_pandas(batch: pa.RecordBatch) -> pd.DataFrame:
    """An output batch as the pandas frame PySpark's public path converts: integers with nulls as Python ints
    (not floats, which lose offsets above 2**53), maps as dicts, lists as arrays."""
    return batch.to_pandas(integer_object_nulls=True, maps_as_pydicts="strict")


def struct_array(batch: pa.RecordBatch, arrow_struct_type: pa.StructType) -> pa.StructArray:
    """``batch`` as PySpark's conversion builds the struct array of a processor's output type
    (``_create_struct_array``): its columns by the fields' names, each cast to the field's type where it differs
    (``spark.sql.execution.arrow.useLargeVarTypes``: large strings), the struct by names (nullable fields)."""
    fields = list(arrow_struct_type)
    columns = [batch.column(f.name) for f in fields]
    return pa.StructArray.from_arrays([c if c.type == f.type else c.cast(f.type) for c, f in zip(columns, fields,
                                                                                                 strict=True)],
                                      [f.name for f in fields])


@functools.cache
def install_arrow_output() -> bool:
    """The serializer's hook for :func:`arrow_output`, installed once in this process (a Python worker): a frame
    that carries a batch becomes the batch's struct array; any other frame takes PySpark's own conversion. False
    (nothing installed) without the hooks."""
    if not enabled():
        return False
    from pyspark.sql.pandas.serializers import TransformWithStateInPandasSerializer

    original = TransformWithStateInPandasSerializer._create_struct_array

    def create_struct_array(self: Any, df: Any, arrow_struct_type: pa.StructType) -> pa.Array:
        batch = df.attrs.get(ARROW_OUTPUT) if isinstance(df, pd.DataFrame) else None
        if batch is None:
            return original(self, df, arrow_struct_type)
        return struct_array(batch, arrow_struct_type)

    TransformWithStateInPandasSerializer._create_struct_array = create_struct_array  # type: ignore[method-assign]
    return True


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


JVM_SHUTDOWN_PRIORITY = 50
"""The place of :class:`JvmShutdown`'s hook in Hadoop's ShutdownHookManager, which runs its hooks one at a time,
highest priority first: above Spark's own hook (``FileSystem.SHUTDOWN_HOOK_PRIORITY + 30``, 40), which stops the
SparkContext."""
JVM_SHUTDOWN_WAIT_S = 20.0
"""How long the hook holds the JVM's exit for the job to stop: the micro-batch in flight (``RunningJob.stop`` waits
up to 10 s for it) and the query's stop. Hadoop gives a hook 30 s (``hadoop.service.shutdown.timeout``)."""
JVM_GONE_WAIT_S = 30.0
"""How long the job's Python waits for the exiting JVM to be gone (:meth:`JvmShutdown.outlive`)."""


class JvmShutdown:
    """The driver's JVM told to exit (a SIGTERM to it), seen from the job's Python. Under spark-submit (Kubernetes,
    YARN) the JVM is the driver and the job's Python its child: a SIGTERM reaches only the JVM, whose shutdown
    hooks stop the SparkContext under the running micro-batch (an INTERNAL_ERROR in the log, the micro-batch run
    again at the next start). A hook in Hadoop's ShutdownHookManager, before Spark's own, sets ``stop`` (what a
    SIGTERM to the Python sets) and holds the JVM's exit until the job has stopped between two micro-batches
    (:meth:`done`), at most :data:`JVM_SHUTDOWN_WAIT_S`; then Spark's hooks stop the SparkContext.

    The hook is this object's :meth:`run`, a Py4J proxy of ``java.lang.Runnable`` in a ``java.lang.Thread`` whose
    ``run`` Hadoop calls. Without the private hooks (another PySpark version) none is registered: the JVM stops at
    once, as Spark's own."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.exiting = threading.Event()
        """The hook ran: the JVM is exiting, and stops the SparkContext itself."""
        self._done = threading.Event()
        self._manager: Any = None
        self._registered: Any = None
        self._jvm_pid: int | None = None

    @classmethod
    def register(cls, spark: SparkSession, stop: threading.Event) -> JvmShutdown:
        hook = cls(stop)
        if not enabled():
            return hook
        from pyspark.java_gateway import ensure_callback_server_started

        sc = spark.sparkContext
        ensure_callback_server_started(sc._gateway)
        jvm = sc._jvm
        assert jvm is not None
        hook._jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
        hook._manager = jvm.org.apache.hadoop.util.ShutdownHookManager.get()
        # a Java object of its own for the hook, which Hadoop finds again by reference: Py4J makes a new proxy each
        # time a Python object crosses to the JVM
        hook._registered = jvm.java.lang.Thread(hook, "replmon-stop")
        hook._manager.addShutdownHook(hook._registered, JVM_SHUTDOWN_PRIORITY)
        return hook

    def run(self) -> None:
        """The JVM's shutdown: stop the job, wait for it."""
        self.exiting.set()
        self.stop.set()
        self._done.wait(JVM_SHUTDOWN_WAIT_S)

    def close(self) -> bool:
        """The job stopped, before the SparkContext: the hook removed, unless the JVM is exiting. Returns whether
        it is: then Spark stops its context itself once the hook lets it go on (:meth:`done`), and of PySpark's
        own stop only the accumulator server's is done here: its handler reads the JVM's connection, whose end
        when the JVM exits would be an EOFError's traceback (the shutdown returns once the handler has left)."""
        if self._manager is not None and not self.exiting.is_set():
            try:
                if not self._manager.isShutdownInProgress():
                    self._manager.removeShutdownHook(self._registered)
            except Exception as exc:  # the JVM began to exit meanwhile (or is gone): the hook may run
                log.debug("removing the JVM shutdown hook: %s", exc)
        if not self.exiting.is_set():
            return False
        sc = SparkContext._active_spark_context
        server = getattr(sc, "_accumulatorServer", None)
        if server is not None:
            server.shutdown()
            sc._accumulatorServer = None  # type: ignore[union-attr]
        return True

    def done(self) -> None:
        """The job stopped: the JVM's exit goes on."""
        self._done.set()

    def outlive(self) -> None:
        """Wait (at most :data:`JVM_GONE_WAIT_S`) until the exiting JVM is gone, so that the hook's answer reaches
        it before this process ends: the JVM is this process's parent under spark-submit, its child started by
        PySpark otherwise."""
        if self._jvm_pid is None:
            return
        deadline = time.monotonic() + JVM_GONE_WAIT_S
        proc = getattr(SparkContext._gateway, "proc", None)
        while (self._jvm_pid == os.getppid() or (proc is not None and proc.poll() is None)) \
                and time.monotonic() < deadline:
            time.sleep(0.1)

    class Java:
        implements = ["java.lang.Runnable"]
