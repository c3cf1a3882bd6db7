"""The Grafana dashboards: deterministic build, committed files up to date, every query parsed by a real
Prometheus and using only exported metrics, and `replmon dashboards push` against a local stub of Grafana's
HTTP API (no Grafana server can run here)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import build, files
from dashboards.build import build_all, expressions, to_json
from dashboards.catalog import known_series_names, referenced_names
from replmon.cli import main
from replmon.core.processes import stop_processes
from replmon.testbed.localcluster.cluster import free_port

ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = ROOT / "dashboards"
UIDS = ("replmon-overview", "replmon-brokers", "replmon-partition")
TOKEN = "glsa_replmon_test_token_5e3f9a1c"

# Grafana's variables, as a panel query would see them for one concrete choice
SUBSTITUTE = {"cluster": "local", "topic": "orders", "partition": "0", "broker": "1", "datasource": "prometheus",
              "__rate_interval": "1m", "__interval": "30s", "__range": "1h"}


def _substitute(expr: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in SUBSTITUTE, f"unknown variable ${name} in {expr}"
        return SUBSTITUTE[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def _all_expressions() -> list[tuple[str, str]]:
    return [(uid, expr) for uid, data in build_all().items() for expr in expressions(data)]


# ------------------------------------------------------------------------------------------------ build
def test_build_is_deterministic() -> None:
    first = {uid: to_json(d) for uid, d in build_all().items()}
    second = {uid: to_json(d) for uid, d in build_all().items()}
    assert first == second
    assert files.rendered() == files.rendered()
    assert tuple(first) == UIDS


def test_committed_files_equal_a_fresh_build() -> None:
    fresh = files.rendered()
    stale = [rel for rel, text in fresh.items()
             if not (DASHBOARDS / rel).is_file() or (DASHBOARDS / rel).read_text() != text]
    assert not stale, f"run `replmon dashboards build` and commit: {stale}"
    committed = {f"generated/{p.name}" for p in (DASHBOARDS / "generated").glob("*.json")}
    assert committed == {rel for rel in fresh if rel.startswith("generated/")}


def test_cli_build_writes_json_and_provisioning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from replmon.cli import dashboards as cli

    (tmp_path / "generated").mkdir()
    (tmp_path / "generated" / "old-dashboard.json").write_text("{}")
    monkeypatch.setattr(cli, "HERE", tmp_path)
    assert main(["dashboards", "build"]) == 0
    written = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    assert written == set(files.rendered())
    assert len(capsys.readouterr().out.splitlines()) == len(written)
    for uid in UIDS:
        data = json.loads((tmp_path / "generated" / f"{uid}.json").read_text())
        assert data["uid"] == uid
    provider = yaml.safe_load((tmp_path / "provisioning" / "dashboards" / "replmon.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == files.GRAFANA_DASHBOARDS_DIR
    assert provider["providers"][0]["folder"] == "replmon"
    source = yaml.safe_load((tmp_path / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert source["datasources"][0]["type"] == "prometheus"


def test_dashboards_have_their_variables_panels_and_annotations() -> None:
    boards = build_all()
    variables = {uid: [v["name"] for v in d["templating"]["list"]] for uid, d in boards.items()}
    assert variables == {
        "replmon-overview": ["datasource", "cluster"],
        "replmon-brokers": ["datasource", "cluster", "broker"],
        "replmon-partition": ["datasource", "cluster", "topic", "partition"],
    }
    for uid, data in boards.items():
        panels = data["panels"]
        ids = [p["id"] for p in panels]
        assert len(ids) == len(set(ids)), uid
        for panel in panels:
            if panel["type"] == "row":
                continue
            assert panel["targets"], f"{uid}: panel {panel['title']} has no query"
            refs = [t["refId"] for t in panel["targets"]]
            assert len(refs) == len(set(refs)) and all(refs), f"{uid}/{panel['title']}: refIds {refs}"
            for target in panel["targets"]:
                assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        names = [a["name"] for a in data["annotations"]["list"]]
        assert {"replmon events", "Committed data lost", "Unclean elections"} <= set(names), uid
        for note in data["annotations"]["list"]:
            if note.get("expr"):
                assert note["titleFormat"] and note["tagKeys"] and note["step"], note["name"]
    partition_exprs = " ".join(expressions(boards["replmon-partition"]))
    for metric in ("replmon_partition_isr_size", "replmon_partition_high_watermark",
                   "replmon_partition_log_end_offset", "replmon_partition_hw_lag_messages",
                   "replmon_replica_lag_messages", "replmon_partition_leader_epoch"):
        assert metric in partition_exprs
    broker_exprs = " ".join(expressions(boards["replmon-brokers"]))
    for metric in ("replmon_broker_replicas", "replmon_broker_leaders", "replmon_broker_out_of_isr_replicas",
                   "replmon_broker_max_replica_lag_messages"):
        assert metric in broker_exprs


# ------------------------------------------------------------------------------------------------ metrics
def test_no_panel_asks_for_a_metric_replmon_does_not_export() -> None:
    known = known_series_names()
    seen: set[str] = set()
    for uid, expr in _all_expressions():
        names = referenced_names(expr)
        assert names, f"{uid}: query without a replmon metric: {expr}"
        assert names <= known, f"{uid}: unknown metrics {sorted(names - known)} in {expr}"
        seen |= names
    # the committed JSON too (what Grafana actually loads)
    for path in (DASHBOARDS / "generated").glob("*.json"):
        for expr in expressions(json.loads(path.read_text())):
            assert referenced_names(expr) <= known, f"{path.name}: {expr}"
    assert len(seen) >= 40, sorted(seen)


def test_build_refuses_a_metric_outside_the_catalogue(monkeypatch: pytest.MonkeyPatch) -> None:
    def bad() -> build.Built:
        board = build._dashboard("bad", "bad", "bad", [build.datasource_variable()], [])
        board = board.with_panel(build.ts_panel("x", [("replmon_not_exported", "x")], description="x"))
        return build.Built("bad", board)

    monkeypatch.setattr(build, "BUILDERS", (bad,))
    with pytest.raises(ValueError, match="replmon_not_exported"):
        build_all()


# ------------------------------------------------------------------------------------------------ Prometheus
@dataclass
class PrometheusServer:
    url: str

    def query(self, expr: str) -> dict[str, Any]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body: dict[str, Any] = json.load(resp)
        except urllib.error.HTTPError as exc:  # 400 bad_data carries the parse error as JSON
            body = json.load(exc)
        return body


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    binary = shutil.which("prometheus")
    assert binary, "the prometheus server is missing: scripts/setup installs Debian's prometheus package"
    work = tmp_path_factory.mktemp("prometheus")
    config = work / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1m\nscrape_configs: []\n")
    port = free_port()
    log = (work / "prometheus.log").open("w")
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    server = PrometheusServer(f"http://127.0.0.1:{port}")
    try:
        _wait_ready(proc, server.url + "/-/ready", deadline_s=30, log=work / "prometheus.log")
        yield server
    finally:
        stop_processes([proc], grace_s=15)
        log.close()


def _wait_ready(proc: subprocess.Popen[bytes], url: str, deadline_s: float, log: Path) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        try:  # waits on the process: returns at once if it died, else after 0.1 s
            code = proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            continue
        raise AssertionError(f"prometheus exited with {code}: {log.read_text()[-2000:]}")
    raise AssertionError(f"prometheus not ready within {deadline_s} s: {log.read_text()[-2000:]}")


def test_every_panel_query_parses_in_prometheus(prometheus: PrometheusServer) -> None:
    exprs = _all_expressions()
    assert len(exprs) > 50
    failures = []
    for uid, expr in exprs:
        answer = prometheus.query(_substitute(expr))
        if answer.get("status") != "success":
            failures.append(f"{uid}: {expr}\n  -> {answer.get('errorType')}: {answer.get('error')}")
    assert not failures, "\n".join(failures)


def test_prometheus_check_rejects_a_broken_query(prometheus: PrometheusServer) -> None:
    answer = prometheus.query("sum(replmon_events_total")
    assert answer["status"] == "error" and answer["errorType"] == "bad_data"


# ------------------------------------------------------------------------------------------------ push
@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class StubGrafana:
    """Grafana's HTTP API as far as push uses it: folders and dashboards/db; or a fixed refusal."""

    status: int = 200
    folders: list[dict[str, Any]] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)

    def handle(self, method: str, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        self.requests.append(Request(method, path, headers, body))
        if self.status != 200:
            message = {401: "Unauthorized", 403: "Permission denied"}.get(self.status, "error")
            return self.status, {"message": message}
        if method == "GET" and path.startswith("/api/folders"):
            return 200, self.folders
        if method == "POST" and path == "/api/folders":
            folder = {"uid": f"folder-{len(self.folders) + 1}", "title": body["title"], "id": 7}
            self.folders.append(folder)
            return 200, folder
        if method == "POST" and path == "/api/dashboards/db":
            uid = body["dashboard"]["uid"]
            return 200, {"status": "success", "uid": uid, "id": 1, "version": 1, "url": f"/d/{uid}"}
        return 404, {"message": "not found"}


@pytest.fixture
def grafana() -> Iterator[tuple[StubGrafana, str]]:
    stub = StubGrafana()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            status, payload = stub.handle(self.command, self.path, dict(self.headers.items()),
                                          json.loads(raw) if raw else None)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _config(tmp_path: Path, url: str, token: str | None = TOKEN) -> Path:
    grafana: dict[str, Any] = {"url": url, "folder": "Kafka replication"}
    if token is not None:
        grafana["token"] = token
    path = tmp_path / "replmon.yaml"
    path.write_text(yaml.safe_dump({"grafana": grafana}))
    return path


def _push(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["dashboards", "push", "--config", str(config)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_push_uploads_every_dashboard_with_the_token(grafana: tuple[StubGrafana, str], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    stub, url = grafana
    code, out, err = _push(_config(tmp_path, url), capsys)
    assert code == 0, err
    assert TOKEN not in out + err
    assert "pushed 3 dashboards" in out and url in out
    assert all(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in stub.requests)
    created = [r for r in stub.requests if r.method == "POST" and r.path == "/api/folders"]
    assert [r.body["title"] for r in created] == ["Kafka replication"]
    uploads = [r for r in stub.requests if r.path == "/api/dashboards/db"]
    expected = build_all()
    assert [r.body["dashboard"]["uid"] for r in uploads] == list(expected)
    for r in uploads:
        uid = r.body["dashboard"]["uid"]
        assert r.body["dashboard"] == {**expected[uid], "id": None}
        assert r.body["folderUid"] == "folder-1" and r.body["overwrite"] is True
    # a second push reuses the folder
    stub.requests.clear()
    code, _out, err = _push(_config(tmp_path, url), capsys)
    assert code == 0, err
    assert not [r for r in stub.requests if r.method == "POST" and r.path == "/api/folders"]


@pytest.mark.parametrize(("status", "expected"), [
    (401, "refused the token (HTTP 401 Unauthorized)"),
    (403, "(HTTP 403 Forbidden): the token's service account needs the Editor role"),
])
def test_push_refused_is_one_clear_line(grafana: tuple[StubGrafana, str], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str], status: int, expected: str) -> None:
    stub, url = grafana
    stub.status = status
    code, out, err = _push(_config(tmp_path, url), capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert expected in err and url in err and err.startswith("replmon: Grafana at ")
    assert TOKEN not in out + err
    assert stub.requests, "the stub saw no request"


def test_push_unreachable_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there any more
    code, out, err = _push(_config(tmp_path, url), capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert f"replmon: Grafana at {url} is unreachable" in err
    assert TOKEN not in out + err


def test_push_without_token_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = _push(_config(tmp_path, "http://127.0.0.1:1", token=None), capsys)
    assert code == 2
    assert "grafana.token is not set" in err


def test_push_hides_credentials_in_the_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://admin:s3cret-pw@127.0.0.1:{free_port()}"
    code, out, err = _push(_config(tmp_path, url), capsys)
    assert code == 2
    assert "s3cret-pw" not in out + err and TOKEN not in out + err
    assert "is unreachable" in err


def test_push_to_a_url_with_a_port_out_of_range_is_one_clear_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path, "http://admin:s3cret-pw@127.0.0.1:99999")
    code, out, err = _push(config, capsys)
    assert code == 2
    assert err.strip() == (f"replmon: invalid configuration ({config}): grafana.url: not a valid URL: Port out of "
                           "range 0-65535")
    assert "s3cret-pw" not in out + err and TOKEN not in out + err
