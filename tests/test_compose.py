"""docker-compose.yml: every file and directory it mounts or refers to exists in the repository, every replmon
command it runs is a valid CLI invocation, the wiring between services holds, and it fits the Compose
Specification's JSON schema, the one `docker compose config` validates with (no Docker client nor engine here)."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from replmon.cli import build_parser
from replmon.core.config import load_config
from replmon.testbed.localcluster import KAFKA_VERSION
from streaming.batch import STOP_BATCH_WAIT_S

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
COMPOSE_SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"
DOCKERFILE = ROOT / "Dockerfile"
BROKERS = ("kafka-1", "kafka-2", "kafka-3")


def _compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return doc


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = _compose()["services"]
    return services


def _mounts(service: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(source, target, read_only) of each short-syntax volume."""
    out = []
    for entry in service.get("volumes", []):
        assert isinstance(entry, str), f"long volume syntax is not checked: {entry}"
        parts = entry.split(":")
        assert len(parts) in (2, 3), entry
        out.append((parts[0], parts[1], len(parts) == 3 and "ro" in parts[2].split(",")))
    return out


def _replmon_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in _services().items() if s.get("build")}


def _host_path_of(service: dict[str, Any], container_path: str) -> Path:
    """The repository file a container path of ``service`` comes from (through a bind mount)."""
    for source, target, _ro in _mounts(service):
        if source.startswith(".") and (container_path == target or container_path.startswith(target + "/")):
            return (ROOT / source / container_path[len(target):].lstrip("/")).resolve()
    raise AssertionError(f"{container_path} is not bind-mounted from the repository")


def test_every_bind_mount_and_build_context_exists() -> None:
    named = set(_compose().get("volumes") or {})
    for name, service in _services().items():
        for source, target, _ro in _mounts(service):
            if source.startswith("."):
                path = (ROOT / source).resolve()
                assert path.exists(), f"{name}: {source} does not exist"
                assert ROOT in path.parents or path == ROOT, f"{name}: {source} is outside the repository"
            else:
                assert source in named, f"{name}: volume {source} is not declared"
            assert target.startswith("/"), f"{name}: {target}"
        if "build" in service:
            context = ROOT / service["build"]
            assert (context / "Dockerfile").is_file(), f"{name}: no Dockerfile in {context}"


def test_dockerfile_copies_what_exists_and_runs_replmon() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM python:3\.11-slim", text, re.M)
    assert "openjdk-17-jre-headless" in text and "pip install" in text
    for line in re.findall(r"^COPY (.+)$", text, re.M):
        for source in line.split()[:-1]:
            assert (ROOT / source).exists(), f"Dockerfile copies {source}, which does not exist"
    # tini runs deploy/entrypoint.sh, which runs `replmon <command>` for the services' commands (Spark's driver and
    # executor on Kubernetes otherwise: tests/test_deploy.py)
    assert re.search(r'^ENTRYPOINT \["/usr/bin/tini", "-s", "--", "/opt/replmon/entrypoint.sh"\]$', text, re.M)
    assert re.search(r"^COPY deploy/entrypoint\.sh /opt/replmon/entrypoint\.sh$", text, re.M)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored
    # every package pip installs (pyproject's find) is copied before the install, and only those
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    copied = {line.split()[0] for line in re.findall(r"^COPY (\S+ \S+)$", text, re.M)
              if line.split()[0] == line.split()[1]}
    assert {f"{name.rstrip('*')}" for name in packages["include"]} == copied


def test_replmon_commands_are_valid_cli_invocations() -> None:
    parser = build_parser()
    seen = set()
    for name, service in _replmon_services().items():
        command = service["command"]
        assert isinstance(command, list) and all(isinstance(a, str) for a in command), \
            f"{name}: command must be a list of strings, not {command!r}"
        args = parser.parse_args(command)  # SystemExit (a failure) on an invalid invocation
        seen.add(args.command)
        assert args.config is not None, f"{name}: runs without --config"
        config = _host_path_of(service, str(args.config))
        assert config.is_file(), f"{name}: {args.config} comes from {config}, which does not exist"
        load_config(config)  # ReplmonError if the file does not fit the schema
    assert seen == {"collect", "agent", "stream"}


def test_each_replmon_service_has_time_for_its_clean_stop() -> None:
    """SIGTERM stops each stage cleanly (the job after the micro-batch in flight, up to STOP_BATCH_WAIT_S, then
    Spark's own stop): Docker's default grace before SIGKILL, 10 s, is not enough for the job."""
    for name, service in _replmon_services().items():
        grace = re.fullmatch(r"(\d+)s", str(service.get("stop_grace_period", "10s")))
        assert grace is not None, f"{name}: stop_grace_period {service['stop_grace_period']!r} is not in seconds"
        assert int(grace.group(1)) >= STOP_BATCH_WAIT_S + 15, f"{name}: {grace.group(0)} to stop in"


def test_parser_rejects_an_invalid_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["agent", "--config", "/etc/replmon/replmon.yaml"])  # --log-dir missing
    assert exited.value.code == 2
    assert "--log-dir" in capsys.readouterr().err


def test_compose_config_fits_the_schema_and_the_compose_network() -> None:
    config = load_config(ROOT / "conf" / "replmon.compose.yaml")
    assert [c.name for c in config.clusters] == ["compose"]
    listeners = {}
    for broker in BROKERS:
        env = _services()[broker]["environment"]
        listeners[broker] = env["KAFKA_ADVERTISED_LISTENERS"].split(",")[0].removeprefix("PLAINTEXT://")
    assert config.clusters[0].bootstrap_servers == list(listeners.values())
    # both exporters listen on all interfaces of their containers, on the ports Prometheus scrapes
    prom = yaml.safe_load((ROOT / "conf" / "prometheus" / "prometheus.compose.yml").read_text())
    targets = {j["job_name"]: j["static_configs"][0]["targets"] for j in prom["scrape_configs"]}
    assert config.stream.metrics_host == config.collector.metrics_host == "0.0.0.0"
    assert targets == {"replmon-stream": [f"stream:{config.stream.metrics_port}"],
                       "replmon-collector": [f"collector:{config.collector.metrics_port}"]}
    assert {"stream", "collector"} <= set(_services())


def test_kafka_is_three_kraft_brokers_and_a_controller_of_the_local_version() -> None:
    services = _services()
    kafka = {n: s for n, s in services.items() if str(s.get("image", "")).startswith("apache/kafka")}
    assert set(kafka) == {"controller", *BROKERS}
    for name, service in kafka.items():
        assert service["image"] == f"apache/kafka:{KAFKA_VERSION}", name
        env = service["environment"]
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "0@controller:9093"
        assert env["KAFKA_PROCESS_ROLES"] == ("controller" if name == "controller" else "broker")
    assert sorted(services[b]["environment"]["KAFKA_NODE_ID"] for b in BROKERS) == [1, 2, 3]


def test_each_agent_reads_its_brokers_data_volume_read_only() -> None:
    services = _services()
    config = load_config(ROOT / "conf" / "replmon.compose.yaml")
    parser = build_parser()
    agents = {n: s for n, s in services.items() if s.get("build") and s["command"][0] == "agent"}
    assert len(agents) == len(BROKERS)
    covered = set()
    for name, agent in agents.items():
        args = parser.parse_args(agent["command"])
        broker = next(b for b in BROKERS if services[b]["environment"]["KAFKA_NODE_ID"] == args.broker_id)
        data_dir = services[broker]["environment"]["KAFKA_LOG_DIRS"]
        broker_volume = next(src for src, tgt, _ro in _mounts(services[broker]) if tgt == data_dir)
        mounts = {src: (tgt, ro) for src, tgt, ro in _mounts(agent)}
        assert broker_volume in mounts, f"{name} does not mount {broker}'s data volume {broker_volume}"
        target, read_only = mounts[broker_volume]
        assert read_only, f"{name} must mount {broker_volume} read-only"
        assert [str(d) for d in args.log_dirs] == [target]
        assert config.clusters[0].log_dirs[args.broker_id] == [Path(target)]
        assert broker in agent.get("depends_on", []), f"{name} must start after {broker} (volume ownership)"
        covered.add(broker)
    assert covered == set(BROKERS)


def test_prometheus_and_grafana_are_provisioned_from_the_repository() -> None:
    services = _services()
    prom = services["prometheus"]
    flags = dict(a.removeprefix("--").split("=", 1) for a in prom["command"])
    rules_config = _host_path_of(prom, flags["config.file"])
    assert rules_config == (ROOT / "conf" / "prometheus" / "prometheus.compose.yml").resolve()
    rule_files = yaml.safe_load(rules_config.read_text())["rule_files"]
    assert all((rules_config.parent / f).is_file() for f in rule_files) and rule_files == ["alerts.yml"]

    grafana = services["grafana"]
    provider = yaml.safe_load(_host_path_of(grafana, "/etc/grafana/provisioning/dashboards/replmon.yml")
                              .read_text())
    dashboards_dir = provider["providers"][0]["options"]["path"]
    generated = _host_path_of(grafana, dashboards_dir)
    assert generated == (ROOT / "dashboards" / "generated").resolve()
    assert sorted(p.name for p in generated.glob("*.json")), "no generated dashboards"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert _host_path_of(grafana, home).is_file()
    datasources = yaml.safe_load(_host_path_of(grafana, "/etc/grafana/provisioning/datasources/prometheus.yml")
                                 .read_text())
    assert datasources["datasources"][0]["url"] == "http://prometheus:9090"


def compose_schema_errors(doc: Any) -> list[str]:
    """What the Compose Specification's JSON schema (compose-go's, vendored: tests/data/compose-spec.json.NOTICE)
    refuses in the Compose file ``doc``, each as its path and message: what ``docker compose config`` checks
    before it loads a file. Its string formats (durations, ports) are not checked: compose-go registers its own
    checkers for them."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(json.loads(COMPOSE_SCHEMA.read_text()))
    return [f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


def test_the_vendored_compose_schema_is_compose_go_s_file_unchanged() -> None:
    notice = (COMPOSE_SCHEMA.parent / "compose-spec.json.NOTICE").read_text()
    assert "github.com/compose-spec/compose-go/v2" in notice and "Apache License, Version 2.0" in notice
    digest = re.search(r"sha256 is\s+([0-9a-f]{64})", notice)
    assert digest, notice
    assert hashlib.sha256(COMPOSE_SCHEMA.read_bytes()).hexdigest() == digest.group(1)


def test_docker_compose_yml_fits_the_compose_specification() -> None:
    assert compose_schema_errors(_compose()) == []
    # the schema is live: a misspelt key of a service, and a port of the wrong type, are refused
    broken = _compose()
    name = next(iter(broken["services"]))
    broken["services"][name]["restart_policy"] = "always"
    broken["services"][name]["ports"] = {"9464": 9464}
    errors = compose_schema_errors(broken)
    assert any(e.startswith(f"services.{name}:") and "'restart_policy'" in e and "unexpected" in e
               for e in errors), errors
    assert any(e.startswith(f"services.{name}.ports:") for e in errors), errors

