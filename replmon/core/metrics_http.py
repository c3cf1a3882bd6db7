"""The stages' Prometheus endpoints: /metrics over HTTP, one clear error when the port is taken."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from replmon.core.errors import ReplmonError


def serve_metrics(registry: CollectorRegistry, host: str, port: int, setting: str) -> Any:
    """Serve ``registry`` as /metrics on ``host``:``port`` (0: a free one, ``server.server_port`` tells which) from a
    daemon thread; returns the server (``.shutdown()`` stops it). An address that cannot be bound (a port another
    process holds) is one ReplmonError that names the stage's ``setting``."""
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ReplmonError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc} (set {setting} to another "
                           "port, or 0 for a free one)") from None
    return server
