"""Loading the configuration: every mistake one clear ReplmonError, environment overrides, secrets never
printed, and the commented example in conf/ covering the whole model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pydantic import BaseModel

from replmon.core.config import GrafanaConfig, ReplmonConfig, StreamConfig, load_config
from replmon.core.errors import ReplmonError

EXAMPLE = Path(__file__).resolve().parents[1] / "conf" / "replmon.example.yaml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "replmon.yaml"
    path.write_text(text)
    return path


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ReplmonError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", env={})


def test_a_path_that_is_no_file_says_what_it_is(tmp_path: Path) -> None:
    with pytest.raises(ReplmonError) as info:
        load_config(tmp_path, env={})
    assert str(info.value) == f"config file {tmp_path} is a directory"
    with pytest.raises(ReplmonError) as info:
        load_config("/dev/null", env={})
    assert str(info.value) == "config file /dev/null is not a regular file"


def test_a_pipe_is_read_as_the_file(tmp_path: Path) -> None:
    """``--config <(...)`` (a FIFO as /dev/fd/N): not a file to Path.is_file, but readable."""
    fifo = tmp_path / "replmon.yaml"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=("collector: {interval_s: 3}\n",))
    writer.start()
    try:
        assert load_config(fifo, env={}).collector.interval_s == 3
    finally:
        writer.join(timeout=10)


def test_a_file_that_is_not_utf8_is_one_line_that_says_where(tmp_path: Path) -> None:
    path = tmp_path / "replmon.yaml"
    path.write_bytes(b"clusters: []\n# caf\xe9\n")
    with pytest.raises(ReplmonError) as info:
        load_config(path, env={})
    assert str(info.value) == f"config file {path} is not UTF-8 text (line 2: byte 0xe9, invalid continuation byte)"


def test_a_grafana_url_with_a_port_out_of_range_is_refused_without_echoing_it(tmp_path: Path) -> None:
    with pytest.raises(ReplmonError) as info:
        load_config(write(tmp_path, "grafana: {url: 'http://admin:pw@127.0.0.1:99999'}"), env={})
    assert str(info.value) == (f"invalid configuration ({tmp_path / 'replmon.yaml'}): grafana.url: not a valid URL: "
                               "Port out of range 0-65535")


def test_bad_yaml_is_one_line_that_says_where(tmp_path: Path) -> None:
    with pytest.raises(ReplmonError, match="not valid YAML") as info:
        load_config(write(tmp_path, "clusters: [\n  - name: x\n bad"), env={})
    assert "\n" not in str(info.value)
    path = write(tmp_path, 'clusters:\n  - name: c1\n    bootstrap_servers: ["127.0.0.1:1"\n')
    with pytest.raises(ReplmonError) as info:
        load_config(path, env={})
    # the line and column an editor shows, of where PyYAML found the end of the text inside the list
    assert str(info.value) == (f"config file {path} is not valid YAML: line 4, column 1: expected ',' or ']', but "
                               "got '<stream end>' (while parsing a flow sequence)")


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    """PyYAML keeps the last of two equal keys: the first (a whole section, perhaps) would be lost without a word."""
    path = write(tmp_path, "collector:\n  interval_s: 5\nstream:\n  trigger_interval_s: 2\ncollector:\n  "
                           "metrics_port: 0\n")
    with pytest.raises(ReplmonError, match=re.escape(
            f"config file {path} is not valid YAML: line 5, column 1: key 'collector' given twice (first on line 1)")):
        load_config(path, env={})
    nested = write(tmp_path, "clusters:\n- name: a\n  bootstrap_servers: [h:1]\n  name: b\n")
    with pytest.raises(ReplmonError, match=re.escape("line 4, column 3: key 'name' given twice (first on line 2)")):
        load_config(nested, env={})
    # a merge key ('<<') is YAML's own way to override keys, and two sections may hold equal keys
    merged = write(tmp_path, "x-defaults: &d {interval_s: 5}\ncollector:\n  <<: *d\n  interval_s: 7\n"
                             "stream: {trigger_interval_s: 5}\n")
    with pytest.raises(ReplmonError, match="x-defaults: Extra inputs"):  # the anchor's holder is no setting
        load_config(merged, env={})
    merged.write_text("collector:\n  <<: {interval_s: 5, metrics_port: 0}\n  interval_s: 7\n")
    config = load_config(merged, env={})
    assert config.collector.interval_s == 7 and config.collector.metrics_port == 0


def test_null_in_a_variable_is_the_none_of_an_optional_setting(tmp_path: Path) -> None:
    config = load_config(None, env={"REPLMON_COLLECTOR__METRICS_PORT": "null"})
    assert config.collector.metrics_port is None
    with pytest.raises(ReplmonError, match=re.escape("collector.interval_s (REPLMON_COLLECTOR__INTERVAL_S): ")):
        load_config(None, env={"REPLMON_COLLECTOR__INTERVAL_S": "null"})


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ReplmonError, match="mapping"):
        load_config(write(tmp_path, "- a\n- b\n"), env={})


@pytest.mark.parametrize("text, where", [
    ("collector: {interval_s: soon}", "collector.interval_s"),
    ("clusters: [{name: a, bootstrap_servers: [nohostport]}]", "clusters.0.bootstrap_servers"),
    ("clusters: [{name: a}]", "clusters.0.bootstrap_servers"),
    ("collectr: {}", "collectr"),
    (f"collector: {{collector_id: {'x' * 181}}}", "collector.collector_id"),
    ("clusters: [{name: a, bootstrap_servers: 'h:1'}, {name: a, bootstrap_servers: 'h:2'}]", "unique"),
    ("stream: {checkpoint_dir: 's3://bucket/replmon/checkpoint'}", "stream.checkpoint_dir"),
    ("stream: {history_dir: 'https://example.com/history'}", "stream.history_dir"),
    ("stream: {checkpoint_dir: 'file://host/replmon'}", "stream.checkpoint_dir"),
    ("stream: {checkpoint_dir: ''}", "stream.checkpoint_dir"),
    ("stream: {read_tasks: 0}", "stream.read_tasks"),
    ("stream: {forget_after_s: -1}", "stream.forget_after_s"),
    ("stream: {stale_after_s: 60, forget_after_s: 60}", "forget_after_s (60) must be greater than stale_after_s (60)"),
])
def test_wrong_types_name_the_field(tmp_path: Path, text: str, where: str) -> None:
    with pytest.raises(ReplmonError, match=re.escape(where)):
        load_config(write(tmp_path, text), env={})


@pytest.mark.parametrize("text, reason", [
    ("clusters: [{name: a, bootstrap_servers: '127.0.0.1:1 127.0.0.1:2'}]",
     "clusters.0.bootstrap_servers: bootstrap server '127.0.0.1:1 127.0.0.1:2' is not HOST:PORT: separate servers "
     "with commas"),
    ("clusters: [{name: a, bootstrap_servers: 'http://127.0.0.1:1'}]",
     "clusters.0.bootstrap_servers: bootstrap server 'http://127.0.0.1:1' is not HOST:PORT: no scheme (the protocol "
     "is security.protocol)"),
    ("transport: {bootstrap_servers: 'k1'}", "transport.bootstrap_servers: bootstrap server 'k1' is not HOST:PORT"),
    ("transport: {bootstrap_servers: ['k1:9092', 'localhost']}",
     "transport.bootstrap_servers: bootstrap server 'localhost' is not HOST:PORT"),
])
def test_a_bootstrap_server_that_is_not_host_port_is_refused_with_why(tmp_path: Path, text: str, reason: str) -> None:
    with pytest.raises(ReplmonError) as refused:
        load_config(write(tmp_path, text), env={})
    assert str(refused.value).endswith(reason)
    assert load_config(write(tmp_path, "transport: {bootstrap_servers: 'k1:9092,k2:9092'}"),
                       env={}).transport.bootstrap_servers == ["k1:9092", "k2:9092"]


def test_forget_after_follows_stale_after_unless_set(tmp_path: Path) -> None:
    """Unset, a partition is forgotten after ten times stale_after_s, whatever that is: a long stale_after_s alone
    is no error."""
    assert load_config(write(tmp_path, "stream: {stale_after_s: 600}"), env={}).stream.forget_after() == 6000
    assert load_config(write(tmp_path, "stream: {forget_after_s: 0}"), env={}).stream.forget_after() == 0


def test_sasl_without_password(tmp_path: Path) -> None:
    text = ("clusters: [{name: a, bootstrap_servers: 'h:9092', security: "
            "{protocol: SASL_SSL, sasl_mechanism: PLAIN, username: u}}]")
    with pytest.raises(ReplmonError, match="needs password"):
        load_config(write(tmp_path, text), env={})


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "collector: {interval_s: 5}\nclusters: [{name: a, bootstrap_servers: 'h:9092'}]")
    config = load_config(path, env={"REPLMON_COLLECTOR__INTERVAL_S": "2",
                                    "REPLMON_TRANSPORT__SAMPLES_TOPIC": "s"})
    assert config.collector.interval_s == 2 and config.transport.samples_topic == "s"
    assert config.clusters[0].name == "a"
    config = load_config(path, env={"REPLMON_CLUSTERS": '[{"name": "b", "bootstrap_servers": ["k:1"]}]'})
    assert [c.name for c in config.clusters] == ["b"]


def test_a_bad_value_from_the_environment_names_its_variable(tmp_path: Path) -> None:
    """The file does not hold the value: the error says which variable gave it (never the value)."""
    path = write(tmp_path, "collector: {interval_s: 5}\nclusters: [{name: a, bootstrap_servers: 'h:9092'}]")
    with pytest.raises(ReplmonError) as info:
        load_config(path, env={"REPLMON_COLLECTOR__INTERVAL_S": "soon", "REPLMON_STATE_DIR": "/tmp/x",
                               "REPLMON_TRANSPORT__SECURITY__PASSWORD": "hunter2"})
    message = str(info.value)
    assert message.startswith(f"invalid configuration ({path}, environment REPLMON_COLLECTOR__INTERVAL_S, "
                              "REPLMON_TRANSPORT__SECURITY__PASSWORD): ")
    assert "collector.interval_s (REPLMON_COLLECTOR__INTERVAL_S): Input should be a valid number" in message
    assert "soon" not in message and "hunter2" not in message
    with pytest.raises(ReplmonError, match=re.escape("clusters (REPLMON_CLUSTERS): Input should be a valid list")):
        load_config(path, env={"REPLMON_CLUSTERS": '{"name": "b"}'})
    with pytest.raises(ReplmonError, match=re.escape(f"invalid configuration ({path}): collector.interval_s: ")):
        load_config(write(tmp_path, "collector: {interval_s: soon}"), env={"REPLMON_STATE_DIR": "/tmp/x"})


@pytest.mark.parametrize("name, value, message", [
    ("REPLMON_CLUSTERS", "k1:9092",
     'REPLMON_CLUSTERS is not valid JSON: Expecting value: line 1 column 1 (char 0) (it takes a JSON list such as '
     '[{"name": "prod", "bootstrap_servers": ["k1:9092"]}])'),
    ("REPLMON_STREAM__SPARK_CONF", "notjson",
     'REPLMON_STREAM__SPARK_CONF is not valid JSON: Expecting value: line 1 column 1 (char 0) (it takes a JSON '
     'object such as {"spark.executor.memory": "2g"})'),
    ("REPLMON_COLLECTOR", "{bad json",
     'REPLMON_COLLECTOR is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 '
     '(char 1) (it takes a JSON object of collector settings such as {"interval_s": 5.0}, or one setting a '
     'variable such as REPLMON_COLLECTOR__INTERVAL_S)'),
])
def test_a_variable_that_takes_json_and_holds_none_is_one_line_that_says_what_it_takes(
        name: str, value: str, message: str) -> None:
    """pydantic-settings decodes a list, a mapping or a section as JSON and names only the field when it cannot:
    the error names the variable, JSON's reason (not the value) and what the variable takes."""
    with pytest.raises(ReplmonError) as info:
        load_config(None, env={name: value, "REPLMON_COLLECTOR__INTERVAL_S": "2"})
    assert str(info.value) == message


def test_each_source_is_named_once_and_a_validator_s_message_as_it_wrote_it(tmp_path: Path) -> None:
    with pytest.raises(ReplmonError) as info:
        load_config(None, env={"REPLMON_COLLECTOR__INTERVAL_S": "soon"})
    assert str(info.value) == ("invalid configuration (environment REPLMON_COLLECTOR__INTERVAL_S): "
                               "collector.interval_s (REPLMON_COLLECTOR__INTERVAL_S): Input should be a valid number, "
                               "unable to parse string as a number")
    path = write(tmp_path, "clusters: [{name: a, bootstrap_servers: 'h:1'}, {name: a, bootstrap_servers: 'h:2'}]")
    with pytest.raises(ReplmonError) as info:
        load_config(path, env={})
    assert str(info.value) == f"invalid configuration ({path}): cluster names must be unique: a"
    with pytest.raises(ReplmonError) as info:
        load_config(write(tmp_path, "stream: {stale_after_s: 60, forget_after_s: 60}"), env={})
    assert "stream: forget_after_s (60) must be greater than stale_after_s (60)" in str(info.value)


@pytest.mark.parametrize("name, why", [
    ("REPLMON_COLLECTR__INTERVAL_S", "there is no section 'collectr' (did you mean collector?); the sections: "
                                     "clusters, collector, transport, stream, grafana"),
    ("REPLMON_COLLECTOR__INTERVL_S", "collector has no setting 'intervl_s' (did you mean interval_s?); its settings: "
                                     "interval_s, "),
    ("REPLMON_TRANSPORT__SECURITY__USERNAM", "transport.security has no setting 'usernam' (did you mean username?)"),
    ("REPLMON_COLLECTOR__INTERVAL_S__X", "collector.interval_s is one value, not a section"),
    ("REPLMON_CLUSTERS__0__NAME", "clusters is a list, given whole as JSON (REPLMON_CLUSTERS='[...]')"),
])
def test_an_environment_variable_that_names_no_setting_is_one_clear_error(tmp_path: Path, name: str,
                                                                          why: str) -> None:
    """A nested variable (``__``) is meant as a setting: misspelt, it would be ignored without a word."""
    with pytest.raises(ReplmonError, match=re.escape(f"{name} names no setting: {why}")):
        load_config(None, env={name: "2"})


@pytest.mark.parametrize("text, why", [
    ("colector: {interval_s: 5}", "colector: Extra inputs are not permitted (did you mean collector?)"),
    ("stream: {stale_after: 10}", "stream.stale_after: Extra inputs are not permitted (did you mean stale_after_s?)"),
    ("clusters: [{name: a, bootstrap_servers: ['h:1'], include: ['orders.*']}]",
     "clusters.0.include: Extra inputs are not permitted (did you mean topics.include?)"),
    ("clusters: [{name: a, bootstrap_servers: ['h:1'], security: {sasl_mechnism: PLAIN}}]",
     "clusters.0.security.sasl_mechnism: Extra inputs are not permitted (did you mean sasl_mechanism?)"),
    ("grafana: {zzz: 1}", "grafana.zzz: Extra inputs are not permitted (the settings there: url, "),
])
def test_a_misplaced_or_misspelt_setting_in_the_file_names_the_one_meant(tmp_path: Path, text: str,
                                                                        why: str) -> None:
    with pytest.raises(ReplmonError, match=re.escape(why)):
        load_config(write(tmp_path, text), env={})


def test_every_setting_and_mapping_key_is_reachable_from_the_environment(tmp_path: Path) -> None:
    """Nested variables that name settings load, in any case, beside replmon's other variables."""
    config = load_config(None, env={"REPLMON_STREAM__SPARK_CONF__spark_x": "1", "replmon_collector__interval_s": "3",
                                    "REPLMON_TRANSPORT__SECURITY__USERNAME": "u", "REPLMON_DEBUG": "1",
                                    "REPLMON_DEMO_FAST": "1", "REPLMON_GRAFANA": '{"folder": "f"}'})
    assert config.stream.spark_conf == {"spark_x": "1"} and config.collector.interval_s == 3
    assert config.transport.security is not None and config.transport.security.username == "u"
    assert config.grafana.folder == "f"


def test_environment_overrides_a_section_built_in_code_key_by_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A configuration built from model instances (the benches, the test bed) keeps what the environment does not
    override, as one loaded from YAML does; a secret in such a section survives the merge."""
    monkeypatch.setenv("REPLMON_STREAM__TRIGGER_INTERVAL_S", "7")
    config = ReplmonConfig(stream=StreamConfig(checkpoint_dir="/data/cp", max_offsets_per_trigger=5),
                           grafana=GrafanaConfig(token="t0ken"))
    assert config.stream.trigger_interval_s == 7
    assert str(config.stream.checkpoint_dir) == "/data/cp" and config.stream.max_offsets_per_trigger == 5
    assert config.grafana.token is not None and config.grafana.token.get_secret_value() == "t0ken"


def test_secrets_are_never_printed(tmp_path: Path) -> None:
    secret = "s3cr3t-Pa55"
    text = (f"clusters: [{{name: a, bootstrap_servers: 'h:9092', security: {{protocol: SASL_PLAINTEXT, "
            f"sasl_mechanism: PLAIN, username: u, password: {secret}}}}}]\ngrafana: {{token: {secret}}}")
    config = load_config(write(tmp_path, text), env={})
    assert secret not in repr(config) and secret not in str(config)
    assert secret not in config.model_dump_json()
    assert config.clusters[0].security.kafka_python()["sasl_plain_password"] == secret
    with pytest.raises(ReplmonError) as info:  # an invalid value next to a secret: the message omits inputs
        load_config(write(tmp_path, text.replace("PLAIN,", "PLAIN, port: 1,")), env={})
    assert secret not in str(info.value)
    bad = write(tmp_path, text.replace("h:9092", "nohostport"))
    done = subprocess.run([sys.executable, "-m", "replmon.cli", "collect", "--config", str(bad), "--once"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "bootstrap server" in done.stderr
    assert secret not in done.stderr + done.stdout


def _fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    names = []
    for name, field in model.model_fields.items():
        names.append(prefix + name)
        annotation = field.annotation
        for candidate in (annotation, *getattr(annotation, "__args__", ())):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                names += _fields(candidate, prefix + name + ".")
    return names


def test_the_example_loads_and_covers_every_setting() -> None:
    config = load_config(EXAMPLE, env={})
    assert [c.name for c in config.clusters] == ["prod", "staging"]
    text = EXAMPLE.read_text()
    missing = [f for f in _fields(ReplmonConfig) if not re.search(rf"\b{f.rsplit('.', 1)[-1]}:", text)]
    assert not missing, f"conf/replmon.example.yaml does not mention {missing}"


@pytest.mark.parametrize("given, kept", [
    ("hdfs://namenode:8020/replmon/checkpoint/", "hdfs://namenode:8020/replmon/checkpoint"),
    ("s3a://bucket/replmon", "s3a://bucket/replmon"),
    ("abfss://c@account.dfs.core.windows.net/replmon", "abfss://c@account.dfs.core.windows.net/replmon"),
    ("file:///var/lib/replmon/checkpoint", "/var/lib/replmon/checkpoint"),
])
def test_checkpoint_and_history_take_hadoop_filesystem_uris(tmp_path: Path, given: str, kept: str) -> None:
    config = load_config(write(tmp_path, f"stream: {{checkpoint_dir: '{given}', history_dir: '{given}/h'}}"), env={})
    assert config.stream.checkpoint_dir == kept
    assert config.stream.history_dir == kept.rstrip("/") + "/h"


def test_a_local_checkpoint_path_is_made_absolute_so_no_default_filesystem_reinterprets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(write(tmp_path, "stream: {checkpoint_dir: relative/cp, history_dir: ~/h}"), env={})
    assert config.stream.checkpoint_dir == str(tmp_path / "relative" / "cp")
    assert config.stream.history_dir == str(Path.home() / "h")


def test_spark_s_kafka_source_gets_the_certificates_inline_so_no_executor_needs_the_driver_s_files(
    tmp_path: Path,
) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from replmon.core.config import SecurityConfig
    from replmon.testbed.localcluster import tls

    ca = tls.new_authority()
    keystore = tls.node_keystore(ca)
    key = serialization.load_pem_private_key(keystore, None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)  # the testbed's keys
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    (tmp_path / "client.pem").write_bytes(keystore[keystore.index(b"-----BEGIN CERTIFICATE"):])
    (tmp_path / "client.key").write_bytes(key.private_bytes(  # an encrypted key, as sites keep them
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.BestAvailableEncryption(b"k3y-pass")))
    security = SecurityConfig(protocol="SSL", ssl_cafile=tmp_path / "ca.pem", ssl_certfile=tmp_path / "client.pem",
                              ssl_keyfile=tmp_path / "client.key", ssl_key_password="k3y-pass")
    props = security.java_client(inline=True)
    assert props["ssl.truststore.type"] == props["ssl.keystore.type"] == "PEM"
    assert props["ssl.truststore.certificates"] == ca.cert_pem.decode()
    assert props["ssl.keystore.certificate.chain"] == (tmp_path / "client.pem").read_text()
    assert props["ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8, what Java reads
    inline_key = serialization.load_pem_private_key(props["ssl.keystore.key"].encode(), None)
    assert isinstance(inline_key, ec.EllipticCurvePrivateKey)
    assert inline_key.private_numbers() == key.private_numbers()
    assert not any(k.endswith("location") for k in props)
    # a properties file for Kafka's tools names the CA file, and the client certificate not at all
    assert security.java_client()["ssl.truststore.location"] == str(tmp_path / "ca.pem")
    wrong = security.model_copy(update={"ssl_key_password": None})
    with pytest.raises(ReplmonError, match="cannot read the private key"):
        wrong.java_client(inline=True)
