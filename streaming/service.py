"""The streaming job as a service: ``replmon stream`` (and the job of ``replmon run``) once the front door has
resolved the configuration; a failed query restarts from its checkpoint."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from replmon.core.config import ReplmonConfig
from replmon.core.console import say
from replmon.core.errors import ReplmonError
from replmon.core.processes import interrupt_on_sigterm, stop_signalled, wait_told

if TYPE_CHECKING:
    from streaming.job import RunningJob

MAX_RESTARTS = 5
RESTART_WINDOW_S = 600.0


def samples_topic_ready(config: ReplmonConfig, stop: threading.Event) -> bool:
    """Wait until the samples topic exists (the collectors create it when they first publish); True then, False
    when ``stop`` is set first. Told once: started before any collector, Spark's Kafka source would fail the query
    on the missing topic again and again, each failure a Java stack trace, until the job gave up."""
    from replmon.core.kafka_topics import topic_missing

    topic = config.transport.samples_topic
    return bool(wait_told(lambda: not topic_missing(config, topic),
                          f"replmon stream: waiting for topic {topic} on {','.join(config.samples_bootstrap())}: "
                          "the collectors create it when they first publish", stop))


CLUSTER_POLL_S = 5.0
"""How often the job asks again for a samples cluster none of whose bootstrap servers accepted a connection."""


def samples_cluster_reachable(config: ReplmonConfig, stop: threading.Event) -> bool:
    """Wait until one of the samples cluster's bootstrap servers accepts a connection; True then, False when
    ``stop`` is set first. Asked before Spark starts, and told once with why not (a host name that does not resolve,
    nothing listening, no answer): a mistyped bootstrap server is one line at once, not an error after Spark's
    start and the clients' timeouts, and a samples cluster that is down holds the job back, as the collectors wait
    for it, rather than end it."""
    from replmon.core.kafka_diagnose import none_reachable

    servers = config.samples_bootstrap()
    why = ""

    def reachable() -> bool:
        nonlocal why
        why = none_reachable(servers) or ""
        return not why

    return bool(wait_told(reachable, lambda: f"replmon stream: waiting for the samples cluster: {why}", stop,
                          interval_s=CLUSTER_POLL_S))


def run_job_until_stopped(config: ReplmonConfig, on_started: Callable[[RunningJob], None] | None = None) -> int:
    """Run the job until SIGTERM or SIGINT (from the main thread), then stop it between two micro-batches
    (:meth:`~streaming.job.RunningJob.stop`). A signal only sets a flag the wait checks every second: raised as an
    exception, it would cut a Py4J call in the middle (an ERROR and a traceback in the log at every stop). A query
    that fails (on a starved machine Spark's Python workers can time out connecting back) is restarted from its
    checkpoint, with the same metrics endpoint; more than MAX_RESTARTS failures within RESTART_WINDOW_S end the job
    with an error. ``on_started`` is called with the job once it first runs (``replmon run``'s summary).

    A SIGTERM to the driver's JVM (under spark-submit the job's Python is its child, and only the JVM gets it) sets
    the same flag, from the JVM's shutdown, which waits until the job has stopped
    (:class:`~streaming.pyspark_hooks.JvmShutdown`); the JVM then stops Spark itself."""
    from replmon.core import redact
    from replmon.core.security import Role, check_access
    from streaming.exporter import JobExporter
    from streaming.job import start_job
    from streaming.pyspark_hooks import JvmShutdown
    from streaming.session import get_session

    redact.install(config)
    check_access(config, Role.JOB)  # before Spark starts: a refused user or a missing ACL is one line, at once
    with stop_signalled() as stop:
        if not samples_cluster_reachable(config, stop):
            say("replmon stream: stopping")  # told to stop while it waited for the samples cluster
            return 0
        spark = get_session(config.stream)
        shutdown = JvmShutdown.register(spark, stop)
        exporter = JobExporter(config.stream.series_budget)
        failures: list[float] = []
        try:
            while samples_topic_ready(config, stop):
                job = start_job(spark, config, exporter)
                say(f"replmon stream: reading {config.transport.samples_topic} from "
                    f"{','.join(config.samples_bootstrap())}, metrics on "
                    f"http://{config.stream.metrics_host}:{job.port}/metrics")
                try:
                    if on_started is not None:
                        on_started(job)
                        on_started = None
                    job.await_any(stop=stop)
                    if stop.is_set():
                        say("replmon stream: stopping")
                    return 0
                except RuntimeError as exc:
                    now = time.monotonic()
                    failures = [t for t in failures if now - t < RESTART_WINDOW_S] + [now]
                    reason = str(exc).splitlines()[0][:300]
                    if len(failures) > MAX_RESTARTS:
                        raise ReplmonError(f"the job failed {len(failures)} times within {RESTART_WINDOW_S:.0f} "
                                           f"s; last: {reason}") from exc
                    say(f"replmon stream: a query failed ({reason}); restarting from the checkpoint")
                finally:
                    job.stop()
            say("replmon stream: stopping")  # told to stop while it waited for the samples topic
        finally:
            if not shutdown.close():  # else the exiting JVM stops Spark itself
                spark.stop()
            shutdown.done()
            if shutdown.exiting.is_set():  # the hook's answer goes back before this process ends
                shutdown.outlive()
    return 0


def stream(config: ReplmonConfig) -> int:
    """``replmon stream``: the job until SIGTERM or Ctrl-C, which let the current micro-batch complete
    (RunningJob.stop)."""
    with interrupt_on_sigterm(sigint=True):
        try:
            return run_job_until_stopped(config)
        except KeyboardInterrupt:
            return 0
