"""The stages' /metrics endpoints: a port another process holds is one clear error naming the stage's setting
(the job died with a Python traceback from socketserver), and port 0 serves on a free one."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable

import pytest

from collectors.metrics import CollectorMetrics
from replmon.core.errors import ReplmonError
from streaming.exporter import JobExporter


@pytest.mark.parametrize(("serve", "setting"), [
    (lambda host, port: JobExporter(series_budget=10).serve(host, port), "stream.metrics_port"),
    (lambda host, port: CollectorMetrics().serve(host, port).server_port, "collector.metrics_port"),
])
def test_a_taken_metrics_port_is_one_clear_error_and_port_0_a_free_one(serve: Callable[[str, int], int],
                                                                       setting: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        with pytest.raises(ReplmonError) as info:
            serve("127.0.0.1", taken)
    assert str(info.value) == (f"cannot serve metrics on 127.0.0.1:{taken}: Address already in use (set {setting} "
                               "to another port, or 0 for a free one)")
    with pytest.raises(ReplmonError) as info:
        serve("203.0.113.77", 0)  # TEST-NET-3 (RFC 5737): documentation only, no host's address
    assert str(info.value) == ("cannot serve metrics on 203.0.113.77:0: Cannot assign requested address (set "
                               f"{setting.replace('_port', '_host')} to an address of this host)")
    port = serve("127.0.0.1", 0)
    assert port > 0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.status == 200 and b"# TYPE" in answer.read()
