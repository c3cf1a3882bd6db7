"""The stages' Prometheus endpoints: /metrics over HTTP, one clear error when the port is taken."""

from __future__ import annotations

import errno
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from replmon.core.errors import ReplmonError


def serve_metrics(registry: CollectorRegistry, host: str, port: int, section: str) -> Any:
    """Serve ``registry`` as /metrics on ``host``:``port`` (0: a free one, ``server.server_port`` tells which) from a
    daemon thread; returns the server (``.shutdown()`` stops it). An address that cannot be bound is one
    ReplmonError naming the setting of the stage's configuration ``section`` to change: its ``metrics_port`` for a
    port another process holds, else its ``metrics_host`` (an address not of this host)."""
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        advice = (f"set {section}.metrics_port to another port, or 0 for a free one" if exc.errno == errno.EADDRINUSE
                  else f"set {section}.metrics_host to an address of this host")
        raise ReplmonError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc} ({advice})") from None
    return server
