"""The protocol collector as a service: ``replmon collect`` once the front door has resolved the configuration
(which clusters to watch included)."""

from __future__ import annotations

import logging
import os
import sys

from collectors.metrics import CollectorMetrics
from collectors.protocol.runner import Collector, collector_id
from collectors.publisher import JsonLinesOutput, SamplePublisher, SampleSink, require_samples_cluster
from replmon.core import redact
from replmon.core.config import ReplmonConfig
from replmon.core.console import say
from replmon.core.processes import stop_signalled
from replmon.core.security import Role, check_access

OUR_LOGGERS = ("collectors", "replmon")
"""The collector's own loggers: their INFO lines (what a cluster's first cycle found to sample, a topic that appeared
or grew) are few, one per change, and shown by default, as an operator starting a collector expects to see what it
watches."""


def configure_logging() -> None:
    """Our messages as one line each on stderr, INFO and above; other libraries' warnings; kafka-python's own
    chatter only with REPLMON_DEBUG=1 (then everything, DEBUG included)."""
    debug = os.environ.get("REPLMON_DEBUG", "") not in ("", "0")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("replmon: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.WARNING)
    for name in OUR_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if debug else logging.INFO)
    logging.getLogger("kafka").setLevel(logging.DEBUG if debug else logging.CRITICAL)


def collect(config: ReplmonConfig, *, once: bool = False, json_lines: bool = False) -> int:
    """Sample every watched cluster (``config.clusters``, complete) each ``collector.interval_s`` until interrupted,
    or one cycle with ``once``; ``json_lines`` prints the samples as JSON lines instead of publishing them. Exit
    status: 0, 1 when a cluster failed or samples were not delivered, 2 when every cluster failed."""
    configure_logging()
    redact.install(config)  # kafka-python logs its configuration, password included, at DEBUG
    metrics = CollectorMetrics()
    sink: SampleSink
    if json_lines:
        sink = JsonLinesOutput()
    else:
        if once:
            require_samples_cluster(config)
        check_access(config, Role.COLLECTOR)
        sink = SamplePublisher(config, client_id=f"replmon-collector-{collector_id(config)}", metrics=metrics)
    collector = Collector(config, sink, metrics)
    server = None
    try:
        if once:
            errors = collector.run_once()
            flushed = sink.flush(timeout_s=max(10.0, config.collector.request_timeout_ms / 1000 * 2))
            if not flushed or sink.dropped:
                logging.getLogger("replmon.collector").error(
                    "%d sample(s) not acknowledged by the samples cluster, %d dropped", sink.buffered, sink.dropped)
                flushed = False
            if errors:  # each already reported on one line
                return 2 if len(errors) == len(collector.loops) else 1
            return 0 if flushed else 1
        host, port = config.collector.metrics_host, config.collector.metrics_port
        if port is not None:
            server = metrics.serve(host, port)
            print(f"replmon collect: metrics on http://{host}:{server.server_port}/metrics", file=sys.stderr,
                  flush=True)
        # SIGTERM (a container or a unit stopped) as Ctrl-C: the cycles under way end, the samples are flushed
        with stop_signalled() as stop:
            collector.run(stop)
            if stop.is_set():
                say("replmon collect: stopping")
        return 0
    finally:
        if server is not None:
            server.shutdown()
        sink.close(timeout_s=5.0)
