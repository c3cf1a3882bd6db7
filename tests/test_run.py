"""`replmon run`: collector, one log-dir agent per broker and the job together; the agents keep reporting a
broker that is down; SIGTERM takes every child with it."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from replmon.testbed.harness import JOB_START_TIMEOUT_S, metric, read_topic
from replmon.testbed.kafka_view import wait_until
from replmon.testbed.localcluster import LocalCluster
from streaming.exporter import scrape

pytestmark = [pytest.mark.cluster, pytest.mark.spark]


SUMMARY = re.compile(r"replmon run: watching local \([^)]*\); "
                     r"collector (?P<collector>http://127\.0\.0\.1:\d+/metrics); "
                     r"job (?P<job>http://127\.0\.0\.1:\d+/metrics); events in .*")


def samples(transport: LocalCluster, topic: str) -> list[dict[str, Any]]:
    return read_topic(transport.bootstrap_servers, topic)


def replmon_children_of(pid: int) -> list[int]:
    """Child processes running replmon commands (not Spark's JVM)."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()
            if b"replmon.cli" in Path(f"/proc/{p}/cmdline").read_bytes()]


@pytest.fixture(scope="module")
def transport(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster.up(tmp_path_factory.mktemp("run-transport"), brokers=1, die_with_parent=True,
                           remember=False)
    yield local
    local.down(purge=True)


def test_run_starts_collector_agents_and_job_and_stops_them_all(
    healthy_cluster: LocalCluster, transport: LocalCluster, tmp_path: Path
) -> None:
    config = tmp_path / "replmon.yaml"
    config.write_text(yaml.safe_dump({
        "clusters": [{"name": "local", "bootstrap_servers": healthy_cluster.bootstrap_servers.split(","),
                      "topics": {"include": ["run-.*"]},
                      "log_dirs": {b: [str(healthy_cluster.broker_log_dir(b))] for b in healthy_cluster.broker_ids}}],
        "collector": {"interval_s": 1.0, "metrics_port": 0},
        "transport": {"bootstrap_servers": transport.bootstrap_servers.split(","), "samples_topic": "run.samples",
                      "events_topic": "run.events", "quarantine_topic": "run.quarantine"},
        "stream": {"trigger_interval_s": 1.0, "checkpoint_dir": str(tmp_path / "cp"),
                   "history_dir": str(tmp_path / "history"), "metrics_port": 0, "state_buckets": 4},
    }))
    from replmon.testbed.kafka_view import KafkaView

    view = KafkaView(healthy_cluster.bootstrap_servers)
    view.create_topic("run-orders", assignment={0: [1, 2, 3]})
    view.close()
    log = (tmp_path / "run.log").open("wb")
    run = subprocess.Popen([sys.executable, "-m", "replmon.cli", "run", "--config", str(config)],
                           stdout=log, stderr=subprocess.STDOUT)
    try:
        # port 0: each picks a free port, and run's summary says which
        def summary() -> re.Match[str] | None:
            log.flush()
            return SUMMARY.search((tmp_path / "run.log").read_text(errors="replace"))

        wait_until(summary, 240, "run's summary")
        found = summary()
        assert found is not None
        for url in found.group("collector", "job"):
            assert urllib.request.urlopen(url, timeout=5).status == 200, url
        assert found.group("job") != found.group("collector")
        assert "run.events" in found.group(0) and str(tmp_path / "history") in found.group(0)
        kids = replmon_children_of(run.pid)
        assert len(kids) == 1 + len(healthy_cluster.broker_ids)  # the collector and an agent per broker

        def from_agents() -> set[int]:
            return {s["broker_id"] for s in samples(transport, "run.samples")
                    if s["schema"] == "replica/v1" and s["topic"] == "run-orders"}

        wait_until(lambda: from_agents() == set(healthy_cluster.broker_ids), 60, "replica samples of every broker")

        stopped_at_ms = time.time() * 1000
        healthy_cluster.stop(3)

        def agent_sees_the_stopped_broker() -> bool:
            return any(s["schema"] == "replica/v1" and s["broker_id"] == 3 and s["topic"] == "run-orders"
                       and s["sample_time_ms"] > stopped_at_ms + 2000 and s["log_end_offset"] is not None
                       for s in samples(transport, "run.samples"))

        wait_until(agent_sees_the_stopped_broker, 60, "the agent to keep reading the stopped broker's log dir")
        # a running job: its first micro-batch done (a stop in the middle of a first micro-batch longer than the
        # stop's wait, STOP_BATCH_WAIT_S, interrupts it, and Spark's own threads print what they lost)
        job_port = urllib.parse.urlsplit(found.group("job")).port
        assert job_port is not None
        wait_until(lambda: metric(scrape(job_port), "replmon_job_batches_total"), JOB_START_TIMEOUT_S,
                   "the job's first micro-batch")
        log.flush()
        before_stop = (tmp_path / "run.log").stat().st_size
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=90) == 0
        wait_until(lambda: all(not Path(f"/proc/{k}").exists() for k in kids), 30, "every child to exit")
        # a clean stop is quiet: no error, no traceback (Spark's and Py4J's included), no progress bar
        with (tmp_path / "run.log").open("rb") as f:
            f.seek(before_stop)
            stopping = f.read().decode(errors="replace")
        assert "replmon stream: stopping" in stopping
        noisy = [line for line in stopping.splitlines() if " ERROR " in line or "ERROR:" in line
                 or "Traceback" in line or "Exception" in line]
        assert noisy == [], stopping[-3000:]
        assert "[Stage " not in (tmp_path / "run.log").read_text()
    finally:
        if run.poll() is None:
            run.kill()
