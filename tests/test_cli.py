"""The command line of docs/design.md ("Command line") is a contract: every command exists with its documented
options, and the mistakes a user can make end as one clear line and exit status 2."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from replmon.cli import build_parser, main
from replmon.cli.events import parse_since
from replmon.cli.targets import stream_config
from replmon.core.errors import ReplmonError

CONTRACT = [
    ["cluster", "up", "--brokers", "3", "--dir", "/tmp/x"],
    ["cluster", "status"],
    ["cluster", "down"],
    *[["cluster", "fault", action, "2"] for action in ("pause", "resume", "kill", "stop", "restart")],
    ["collect", "--config", "c.yaml", "--once", "--output", "-"],
    ["agent", "--log-dir", "/a", "/b", "--once", "--output", "-"],
    ["stream", "--config", "c.yaml"],
    ["run", "--config", "c.yaml"],
    ["run", "--cluster-dir", "/x"],
    ["collect", "--cluster-dir", "/x", "--once"],
    ["agent", "--log-dir", "/a", "--cluster-dir", "/x"],
    ["stream", "--cluster-dir", "/x"],
    ["cluster", "status", "--cluster-dir", "/x", "--json"],
    ["events", "--from", "topic", "--follow", "--json", "--cluster-dir", "/x"],
    ["events", "--history-dir", "/h", "--json", "--type", "isr_shrink", "--since", "1h"],
    ["demo"],
    ["demo", "--cluster-dir", "/x"],
    ["dashboards", "build"],
    ["dashboards", "push"],
    ["package", "--output", "/tmp/dist"],
]


@pytest.mark.parametrize("argv", CONTRACT, ids=lambda a: " ".join(a[:3]))
def test_every_documented_invocation_parses(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert callable(args.handler)


@pytest.mark.parametrize("command", [["cluster"], ["cluster", "up"], ["cluster", "fault"], ["collect"], ["agent"],
                                     ["stream"], ["run"], ["demo"], ["dashboards"], ["events"]])
def test_help_describes_each_command(command: list[str]) -> None:
    out = subprocess.run([sys.executable, "-m", "replmon.cli", *command, "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: replmon " + " ".join(command))
    assert len(out.stdout.splitlines()) > 3


def test_bad_set_option_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "up", "--dir", "/nonexistent/x", "--set", "novalue"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "replmon: --set takes KEY=VALUE, not 'novalue'"


def test_missing_config_file_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "--config", str(tmp_path / "none.yaml")]) == 2
    assert capsys.readouterr().err.strip() == f"replmon: config file {tmp_path / 'none.yaml'} does not exist"


def test_events_from_a_topic_on_a_cluster_that_cannot_be_reached_is_one_clear_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("replmon.cli.events.BOOTSTRAP_TIMEOUT_MS", 500)
    config = tmp_path / "dead.yaml"
    config.write_text('clusters: [{name: a, bootstrap_servers: "127.0.0.1:1"}]\n')
    assert main(["events", "--config", str(config), "--from", "topic"]) == 2
    assert capsys.readouterr().err.strip() == ("replmon: cannot reach the events topic's cluster 127.0.0.1:1: "
                                               "cannot connect to any bootstrap server: 127.0.0.1:1 (connection "
                                               "refused: nothing listens there)")


@pytest.mark.parametrize("stage", [["collect"], ["agent", "--log-dir", "LOGDIR"]])
def test_once_with_a_samples_cluster_that_cannot_be_reached_is_one_line_before_anything_is_sampled(
        stage: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One cycle with nowhere to publish it: refused at once with why, not after its flush timed out."""
    with socket.socket() as bound:  # bound, never listening: the port refuses connections
        bound.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{bound.getsockname()[1]}"
        config = tmp_path / "dead.yaml"
        config.write_text(f'clusters: [{{name: a, bootstrap_servers: "{dead}"}}]\n')
        argv = [str(tmp_path) if a == "LOGDIR" else a for a in stage]
        assert main([*argv, "--config", str(config), "--once"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == (f"replmon: samples cluster {dead}: cannot connect to any bootstrap server: {dead} "
                                    "(connection refused: nothing listens there); nothing sampled (one cycle with "
                                    "nowhere to publish it)")


def test_the_job_waits_for_a_samples_cluster_it_cannot_reach_said_at_once_before_spark_starts(
        tmp_path: Path) -> None:
    """A mistyped bootstrap server, or a samples cluster that is down: `replmon stream` says why at once and waits
    (as the collectors do) without starting Spark; a SIGINT ends the wait, exit status 0."""
    with socket.socket() as bound:  # bound, never listening: the port refuses connections
        bound.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{bound.getsockname()[1]}"
        config = tmp_path / "job.yaml"
        config.write_text(f"clusters: [{{name: a, bootstrap_servers: ['no-such-host.invalid:9092', '{dead}']}}]\n"
                          f"stream: {{checkpoint_dir: {tmp_path / 'checkpoint'}}}\n")
        job = subprocess.Popen([sys.executable, "-m", "replmon.cli", "stream", "--config", str(config)],
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        try:
            assert job.stderr is not None
            first = job.stderr.readline()  # the job's first line: it blocks until the job says something
            job.send_signal(signal.SIGINT)
            rest = job.communicate(timeout=60)[1]
        finally:
            job.kill()
    assert first.startswith("replmon stream: waiting for the samples cluster: cannot connect to any bootstrap "
                            "server: no-such-host.invalid:9092 (host name 'no-such-host.invalid' does not resolve: ")
    assert first.rstrip().endswith(f"; {dead} (connection refused: nothing listens there)")
    assert job.returncode == 0, rest
    assert rest.strip() == "replmon stream: stopping"  # no Spark: its JVM would have said a few lines
    assert not (tmp_path / "checkpoint").exists()


def test_since_takes_durations_and_iso_times() -> None:
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    assert parse_since("15m", now) == datetime(2026, 11, 22, 11, 45, tzinfo=UTC)
    assert parse_since("2d", now) == datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    assert parse_since("2026-11-22T10:00:00", now) == datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
    for ago in ("-15m", "15m ago", " 15M "):
        assert parse_since(ago, now) == datetime(2026, 11, 22, 11, 45, tzinfo=UTC)
    assert parse_since("2026-11-22T10:00:00+01:00", now) == datetime(2026, 11, 22, 9, 0, tzinfo=UTC)
    for wrong in ("yesterday", "15", "m", "-15x", "--15m"):
        with pytest.raises(ReplmonError, match="--since takes a duration"):
            parse_since(wrong, now)


@pytest.mark.parametrize("since", [["--since", "-5m"], ["--since=-5m"], ["--since", "5m"], ["--since", "5m ago"]])
def test_since_takes_a_duration_written_with_a_minus_as_its_value(
        since: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--since -5m``: argparse alone takes a value that begins with '-' for an option ("expected one
    argument"); the command line gives it to --since, as an operator means it."""
    from streaming.sinks import HistoryWriter

    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    HistoryWriter(tmp_path).write_events(
        [{"event_id": f"e{minutes}", "type": "STALE", "severity": "warning", "cluster": "c",
          "event_time_ms": now_ms - minutes * 60_000, "detected_time_ms": now_ms, "message": "m"}
         for minutes in (10, 3, 1)], batch_id=1)
    assert main(["events", "--history-dir", str(tmp_path), "--json", *since]) == 0
    printed = [json.loads(line)["event_id"] for line in capsys.readouterr().out.splitlines()]
    assert printed == ["e3", "e1"]


def test_the_command_gives_a_dashed_since_its_value(tmp_path: Path) -> None:
    """The console command reads its own argv (main() without arguments) the same way."""
    done = subprocess.run([sys.executable, "-m", "replmon.cli", "events", "--history-dir", str(tmp_path), "--since",
                           "-5m"], capture_output=True, text=True, timeout=120)
    said = re.fullmatch(rf"no events in {re.escape(str(tmp_path))} since (.+) UTC", done.stderr.strip())
    assert done.returncode == 0 and said, done.stderr
    ago = datetime.now(UTC) - datetime.fromisoformat(said.group(1)).replace(tzinfo=UTC)
    assert timedelta(minutes=5) <= ago < timedelta(minutes=7), ago  # -5m: five minutes before the command ran


def test_a_wrong_since_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "--history-dir", str(tmp_path), "--since", "-5 parsecs"]) == 2
    assert capsys.readouterr().err.strip() == ("replmon: --since takes a duration such as 15m, 2h, 1d or an ISO time, "
                                               "not '-5 parsecs'")


@pytest.mark.parametrize("since", ["1000000d", "99999999999d"])
def test_a_since_before_year_one_is_one_clear_line(since: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "--history-dir", str(tmp_path), "--since", since]) == 2
    assert capsys.readouterr().err.strip() == f"replmon: --since {since} goes back before year 1"


def test_an_environment_variable_that_is_not_json_is_one_clear_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REPLMON_CLUSTERS", "k1:9092")
    assert main(["events", "--history-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        'replmon: REPLMON_CLUSTERS is not valid JSON: Expecting value: line 1 column 1 (char 0) (it takes a JSON list '
        'such as [{"name": "prod", "bootstrap_servers": ["k1:9092"]}])')


@pytest.mark.parametrize("argv, line", [
    (["agent", "--log-dir", "/x", "--broker-id", "one"],
     "replmon agent: argument --broker-id: invalid int value: 'one' (see replmon agent --help)"),
    ([], "replmon: the following arguments are required: COMMAND (see replmon --help)"),
    (["cluster", "restart"], "replmon cluster: argument ACTION: invalid choice: 'restart' (choose from 'up', 'status', "
                             "'down', 'fault', 'elect') (see replmon cluster --help)"),
    (["events", "--frm", "topic"], "replmon events: unrecognized arguments: --frm topic (did you mean --from?) (see "
                                   "replmon events --help)"),
    (["cluster", "down", "--prge"], "replmon cluster down: unrecognized arguments: --prge (did you mean --purge?) (see "
                                    "replmon cluster down --help)"),
    (["collect", "now"], "replmon collect: unrecognized arguments: now (see replmon collect --help)"),
])
def test_a_command_line_argparse_refuses_is_one_line_naming_the_help(argv: list[str], line: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err == line + "\n"


def test_a_misspelt_replmon_variable_is_one_clear_line_for_every_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """REPLMON_STATEDIR for REPLMON_STATE_DIR would put the clusters and checkpoints elsewhere without a word; a
    variable close to no replmon name is another tool's, left alone."""
    monkeypatch.setenv("REPLMON_STATEDIR", str(tmp_path))
    monkeypatch.setenv("REPLMON_BUILD_NUMBER", "7")
    for argv in (["cluster", "status"], ["events", "--history-dir", str(tmp_path)]):
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == (
            "replmon: REPLMON_STATEDIR is no replmon variable (did you mean REPLMON_STATE_DIR?)")
    monkeypatch.delenv("REPLMON_STATEDIR")
    assert main(["events", "--history-dir", str(tmp_path)]) == 0


def test_every_replmon_variable_read_is_known_to_the_misspelling_check() -> None:
    """A variable the code reads that :data:`OTHER_VARIABLES` lacks would itself be refused as a misspelling."""
    import re

    from replmon.core.config import OTHER_VARIABLES

    root = Path(__file__).resolve().parents[1]
    read = set()
    for path in [*root.glob("[!.]*/**/*.py"), *root.glob("deploy/*.sh"), root / "Dockerfile"]:
        if "tests" in path.parts or ".venv" in path.parts:
            continue
        text = path.read_text()
        read |= set(re.findall(r'(?:environ(?:\.get)?\(|getenv\(|environ\[|\$\{|ENV )"?(REPLMON_[A-Z_]+[A-Z])', text))
        read |= set(re.findall(r'_ENV = "(REPLMON_[A-Z_]+)"', text))
    assert read and read <= set(OTHER_VARIABLES), read - set(OTHER_VARIABLES)


def test_a_config_path_that_is_a_directory_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "--config", str(tmp_path), "--history-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"replmon: config file {tmp_path} is a directory"


@pytest.mark.parametrize("given, why", [
    ("s3://b/x", "use s3a:// (Hadoop's S3A connector; s3:// is EMR's own filesystem or nothing)"),
    ("http://h/x", "use a Hadoop filesystem URI: checkpoints need rename and listing, HTTP has neither"),
    ("file://host/x", "a file:// URI names no host (file:///path)"),
    ("hdfs://nn/x?a=1", "a location takes no query or fragment"),
])
def test_a_history_dir_that_can_hold_no_history_is_one_clear_line(
        given: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The words the configuration uses for stream.history_dir."""
    assert main(["events", "--history-dir", given]) == 2
    assert capsys.readouterr().err.strip() == f"replmon: --history-dir: {given!r}: {why}"


def test_a_history_file_that_is_not_parquet_is_one_clear_line(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    part = tmp_path / "events" / "cluster=c" / "date=2024-01-01" / "part-0.parquet"
    part.parent.mkdir(parents=True)
    part.write_text("garbage\n")
    assert main(["events", "--history-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"replmon: cannot read the history at {tmp_path}: Could not open Parquet input source "
                          f"'{part}': Parquet magic bytes not found")
    assert len(err.splitlines()) == 1


def test_the_job_needs_no_watched_cluster_when_the_transport_is_configured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLMON_STATE_DIR", str(tmp_path / "state"))  # no local cluster here
    config = tmp_path / "job.yaml"
    config.write_text("transport:\n  bootstrap_servers: ['127.0.0.1:9092']\n")
    assert stream_config(config).clusters == []
    config.write_text("stream:\n  trigger_interval_s: 2\n")  # the samples topic is on the local cluster: none
    with pytest.raises(ReplmonError, match=r"^no local cluster in .*: start one with `replmon cluster up`$"):
        stream_config(config)


def test_run_tells_its_children_which_local_cluster_to_watch() -> None:
    """`replmon run --cluster-dir DIR`: the collector and every agent watch that cluster too, not the one `cluster
    up` started last."""
    from replmon.cli.run import children
    from replmon.core.config import ClusterConfig, ReplmonConfig

    config = ReplmonConfig(clusters=[ClusterConfig(name="local", bootstrap_servers=["127.0.0.1:1"],
                                                   log_dirs={1: [Path("/d1")], 2: [Path("/d2")]})])
    commands = children(None, config, Path("/clusters/a"))
    assert [c[3] for c in commands] == ["collect", "agent", "agent"]
    assert all(c[-2:] == ["--cluster-dir", "/clusters/a"] for c in commands)
    assert all("--cluster-dir" not in c for c in children(Path("c.yaml"), config, None))


def test_run_passes_the_collectors_output_through_and_reads_its_endpoint(
    capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    """`replmon run` copies the collector's standard error to its own as it comes, and learns from it where the
    collector serves (its port 0 resolved) for the summary."""
    import os

    from replmon.cli.run import StderrTee

    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as stream:
        tee = StderrTee(stream)
        os.write(write_end, b"a line before\nreplmon collect: metrics on http://127.0.0.1:40123/metrics\n")
        assert tee.found.wait(10)
        os.write(write_end, b"a line after\n")
        os.close(write_end)
        tee.join(10)
    assert tee.endpoint == "http://127.0.0.1:40123/metrics"
    assert capfdbinary.readouterr().err == (b"a line before\nreplmon collect: metrics on "
                                           b"http://127.0.0.1:40123/metrics\na line after\n")


def test_package_builds_the_code_archive_and_prints_the_spark_submit_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["package", "--output", str(tmp_path / "dist")]) == 0
    archive, command = capsys.readouterr().out.splitlines()
    assert Path(archive).is_file() and Path(archive).parent == tmp_path / "dist"
    words = command.split()
    assert words[0] == "spark-submit" and f"{Path(archive).as_uri()}#replmon-code" in command
    entry = Path(words[words.index("--config") - 1])
    assert entry.is_file() and entry.name == "submit.py"


def test_package_where_no_directory_can_be_made_is_one_clear_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("")
    assert main(["package", "--output", str(taken)]) == 2
    assert capsys.readouterr().err.strip() == f"replmon: cannot write the package to {taken}: File exists"
    assert main(["package", "--output", str(taken / "sub")]) == 2
    assert capsys.readouterr().err.strip() == f"replmon: cannot write the package to {taken / 'sub'}: Not a directory"


def test_the_jobs_log_lines_stay_whole_whatever_they_hold(capsys: pytest.CaptureFixture[str]) -> None:
    """A line of `replmon stream` is one line in a log of any width (a URL stays whole for grep), and a Spark
    error's ``[ERROR_CLASS]`` in it is text, not markup."""
    from replmon.core.console import say

    line = ("replmon stream: a query failed ([STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
            + "x" * 200 + "); restarting from the checkpoint")
    say(line)
    assert capsys.readouterr().err == line + "\n"


def test_the_demo_shows_the_events_of_its_run_and_counts_the_earlier_ones(tmp_path: Path) -> None:
    """A local cluster started before the demo holds, in its metadata log since the newest snapshot, the broker
    fences and unfences of its earlier runs: the agent publishes them and the job reports them at their own times.
    The demo keeps them all and prints only its own run's, and one line counting the rest before its next table or
    step."""
    from rich.console import Console

    from replmon.cli.demo import Demo

    demo = Demo(fast=True, work=tmp_path, console=Console(record=True, width=300))
    before, now = demo.started_ms - 3_600_000, demo.started_ms + 5_000
    events = [{"event_time_ms": t, "type": kind, "severity": "info", "cluster": "local", "topic": None,
               "message": f"local: broker {b} {kind.split('_')[1].lower()}", "source": "metadata_log"}
              for t, kind, b in [(before, "BROKER_FENCED", 1), (before + 1, "BROKER_UNFENCED", 1),
                                 (now, "BROKER_FENCED", 3), (before + 2, "BROKER_FENCED", 2)]]
    demo.show_events(events[:2])
    demo.show_events(events[2:])  # the consumer's polls bring them in parts, interleaved
    demo.tell_earlier()
    demo.tell_earlier()  # nothing new: no second line
    text = demo.console.export_text()
    assert demo.events == events
    assert [line.split("event ", 1)[1].split()[0] for line in text.splitlines() if " event " in line] == [
        "BROKER_FENCED"]
    assert "local: broker 3 fenced" in text and "broker 1" not in text and "broker 2" not in text
    assert [line.split("s ", 1)[1].strip() for line in text.splitlines() if "dated before" in line] == [
        "3 event(s) dated before this run (the watched cluster's metadata log since its newest snapshot: earlier "
        "runs of this cluster), not shown"]
