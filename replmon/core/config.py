"""replmon's configuration: one pydantic model, loaded from YAML, with environment overrides.

Environment variables override the file: ``REPLMON_<SECTION>__<FIELD>`` (nested with ``__``), for example
``REPLMON_STREAM__TRIGGER_INTERVAL_S=5`` or ``REPLMON_COLLECTOR__INTERVAL_S=2``; lists and mappings take JSON
(``REPLMON_CLUSTERS='[{"name": "prod", "bootstrap_servers": ["k1:9092"]}]'``).

With no cluster configured, replmon watches the local cluster started by ``replmon cluster up``.
Secrets are ``SecretStr``: they print as ``**********`` everywhere.
"""

from __future__ import annotations

import difflib
import itertools
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from replmon.core import locations, spark_settings
from replmon.core.errors import ReplmonError
from replmon.core.kafka_names import topic_problem
from replmon.core.paths import state_dir

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SecurityConfig(_Section):
    protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    username: str | None = None
    password: SecretStr | None = None
    ssl_cafile: Path | None = None
    """PEM bundle of the CAs that signed the brokers' certificates."""
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_key_password: SecretStr | None = None
    ssl_check_hostname: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> SecurityConfig:
        if self.protocol.startswith("SASL"):
            missing = [n for n in ("sasl_mechanism", "username", "password") if getattr(self, n) is None]
            if missing:
                raise ValueError(f"security protocol {self.protocol} needs {', '.join(missing)}")
        elif self.sasl_mechanism is not None:
            raise ValueError(f"sasl_mechanism is set but protocol {self.protocol} does not use SASL")
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"{name} {path} does not exist or is not a file")
        return self

    def kafka_python(self) -> dict[str, Any]:
        """Keyword arguments for kafka-python clients."""
        kw: dict[str, Any] = {"security_protocol": self.protocol}
        if self.protocol.startswith("SASL"):
            kw["sasl_mechanism"] = self.sasl_mechanism
            kw["sasl_plain_username"] = self.username
            kw["sasl_plain_password"] = self.password.get_secret_value() if self.password else None
        if self.protocol in ("SSL", "SASL_SSL"):
            kw["ssl_check_hostname"] = self.ssl_check_hostname
            if self.ssl_cafile:
                kw["ssl_cafile"] = str(self.ssl_cafile)
            if self.ssl_certfile:
                kw["ssl_certfile"] = str(self.ssl_certfile)
            if self.ssl_keyfile:
                kw["ssl_keyfile"] = str(self.ssl_keyfile)
            if self.ssl_key_password:
                kw["ssl_password"] = self.ssl_key_password.get_secret_value()
        return kw

    def java_client(self, inline: bool = False) -> dict[str, str]:
        """Properties for Java Kafka clients (Spark's Kafka source and sink take them with a ``kafka.``
        prefix). ``inline``: the PEM files' contents instead of their paths (Kafka's ssl.truststore.certificates,
        ssl.keystore.certificate.chain and ssl.keystore.key), so that the settings work on any host they reach,
        such as a Spark executor that has none of the driver's files, and with the client certificate (mTLS); the
        private key goes as unencrypted PKCS#8, the form Java reads, in memory only. Without ``inline`` (a
        properties file for Kafka's command-line tools): the CA file's path, no client certificate."""
        props: dict[str, str] = {"security.protocol": self.protocol}
        if self.protocol.startswith("SASL") and self.password is not None:
            module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if self.sasl_mechanism == "PLAIN"
                      else "org.apache.kafka.common.security.scram.ScramLoginModule")
            user = _jaas_quote(self.username or "")
            password = _jaas_quote(self.password.get_secret_value())
            props["sasl.mechanism"] = str(self.sasl_mechanism)
            props["sasl.jaas.config"] = f'{module} required username="{user}" password="{password}";'
        if self.protocol in ("SSL", "SASL_SSL"):
            if self.ssl_cafile:
                props["ssl.truststore.type"] = "PEM"
                if inline:
                    props["ssl.truststore.certificates"] = Path(self.ssl_cafile).read_text()
                else:
                    props["ssl.truststore.location"] = str(self.ssl_cafile)
            if inline and self.ssl_certfile and self.ssl_keyfile:
                props["ssl.keystore.type"] = "PEM"
                props["ssl.keystore.certificate.chain"] = Path(self.ssl_certfile).read_text()
                props["ssl.keystore.key"] = self._pkcs8_key()
            if not self.ssl_check_hostname:
                props["ssl.endpoint.identification.algorithm"] = ""
        return props

    def _pkcs8_key(self) -> str:
        from cryptography.hazmat.primitives import serialization

        assert self.ssl_keyfile is not None
        password = self.ssl_key_password.get_secret_value().encode() if self.ssl_key_password else None
        try:
            key = serialization.load_pem_private_key(Path(self.ssl_keyfile).read_bytes(), password)
        except (ValueError, TypeError) as exc:
            raise ReplmonError(f"cannot read the private key {self.ssl_keyfile}: {exc}") from None
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption()).decode()


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


class TopicFilter(_Section):
    include: list[str] = [".*"]
    """Regular expressions (full match) of the topics to watch."""
    exclude: list[str] = []
    include_internal: bool = False
    """Watch internal topics (__consumer_offsets, __transaction_state, ...) too."""


def host_ports(servers: list[str]) -> list[str]:
    """``servers`` when each is HOST:PORT (a port from 1 to 65535, no scheme, no spaces: Kafka's
    bootstrap.servers); else the first that is not, and why."""
    for server in servers:
        host, sep, port = server.rpartition(":")
        if any(c.isspace() for c in server):
            raise ValueError(f"bootstrap server {server!r} is not HOST:PORT: separate servers with commas")
        if "://" in server:
            raise ValueError(f"bootstrap server {server!r} is not HOST:PORT: no scheme (the protocol is "
                             "security.protocol)")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap server {server!r} is not HOST:PORT")
    return servers


class ClusterConfig(_Section):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
    bootstrap_servers: list[str] = Field(min_length=1)
    security: SecurityConfig = SecurityConfig()
    topics: TopicFilter = TopicFilter()
    log_dirs: dict[int, list[Path]] = {}
    """Broker id -> its log dirs, for the log-dir agents replmon run starts on this host."""

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return [s.strip() for s in value.split(",") if s.strip()] if isinstance(value, str) else value

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_port(cls, value: list[str]) -> list[str]:
        return host_ports(value)


class CollectorConfig(_Section):
    interval_s: float = Field(default=5.0, gt=0)
    lineage_refresh_cycles: int = Field(default=12, ge=1)
    """Fetch every leader's epoch lineage at least every N cycles (and whenever its leader epoch changes)."""
    config_refresh_cycles: int = Field(default=12, ge=1)
    """Re-read topic configs (min.insync.replicas, unclean.leader.election.enable) every M cycles."""
    request_timeout_ms: int = Field(default=5000, ge=100)
    """The longest wait for one broker's answer."""
    cycle_wait_share: float = Field(default=0.6, gt=0, le=1)
    """A cycle waits for the brokers' answers at most this share of ``interval_s`` (at least 1 s, at most
    ``request_timeout_ms``): a broker that does not answer (paused, partitioned off) costs a cycle no more than
    that, its replicas are marked unreachable, and the next cycle starts on time."""
    metadata_interval_s: float | None = Field(default=0.25, gt=0)
    """How often the log-dir agent reads what the KRaft metadata log (``__cluster_metadata-0``, when one of its log
    dirs holds it) appended, and publishes its partition changes: ISR and leader changes at the controller's
    time, detected about this much after the controller wrote them. Null: the agent does not read it."""
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = Field(default=9465, ge=0, le=65535)
    """The collector's /metrics port: 0 picks a free one (printed at start), null serves none."""
    buffer_max_samples: int = Field(default=200_000, ge=1)
    collector_id: str | None = Field(default=None, max_length=180)
    """Defaults to the host name. Samples carry it (at most 200 characters, and the log-dir agent's id is
    ``<collector_id>/logdir-agent``); the collectors build samples without validating them, so it is checked
    here."""


class TransportConfig(_Section):
    """Where samples and events travel: the samples cluster (default: the first watched cluster)."""

    bootstrap_servers: list[str] | None = None
    security: SecurityConfig | None = None
    samples_topic: str = "replmon.samples"
    events_topic: str = "replmon.events"
    quarantine_topic: str = "replmon.quarantine"
    topic_partitions: int = Field(default=6, ge=1)
    topic_replication_factor: int | None = Field(default=None, ge=1, le=32767)
    """The topics' replication factor when replmon creates them; None: the cluster's default.replication.factor."""
    retention_ms: int = Field(default=24 * 3600 * 1000, ge=60_000)
    sample_format: Literal["batch", "json"] = "batch"
    """How the collectors publish partition samples: "batch", a cycle's samples as a few columnar records per
    cluster (``partition_batch/v1``); "json", one JSON record per partition (``partition/v1``: readable by any
    JSON consumer, at a far higher cost per sample to the job: docs/benchmarks.md). The job reads both, also
    mixed on one topic (collectors of both formats, or of versions that wrote JSON only)."""

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return [s.strip() for s in value.split(",") if s.strip()] if isinstance(value, str) else value

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_port(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else host_ports(value)

    @field_validator("samples_topic", "events_topic", "quarantine_topic")
    @classmethod
    def _topic_name(cls, value: str) -> str:
        """A name Kafka would refuse is refused here, not when the first stage creates the topic."""
        if (problem := topic_problem(value)) is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _topics_apart(self) -> TransportConfig:
        """Samples, events and quarantined records each in a topic of their own: the job reads every record of the
        samples topic as a sample."""
        for first, second in itertools.combinations(("samples_topic", "events_topic", "quarantine_topic"), 2):
            if (name := getattr(self, first)) == getattr(self, second):
                raise ValueError(f"{first} and {second} are both {name!r}: each needs a topic of its own")
        return self


MAX_STATE_BUCKETS = 65536
"""The most state buckets a checkpoint may have (stream.state_buckets, streaming.buckets)."""


class StreamConfig(_Section):
    spark_master: str = "local[2]"
    trigger_interval_s: float = Field(default=2.0, gt=0)
    checkpoint_dir: str = Field(default_factory=lambda: str(state_dir() / "stream" / "checkpoint"))
    """Spark's checkpoint and what the job keeps beside it: a local directory (the driver's disk, local mode
    only) or a Hadoop filesystem URI every executor and the driver reach (hdfs://, s3a://, abfss://, gs://, ...;
    replmon.core.locations)."""
    history_dir: str = Field(default_factory=lambda: str(state_dir() / "stream" / "history"))
    """The Parquet history of events and partitions: a local directory or a Hadoop filesystem URI, like
    checkpoint_dir."""
    state_buckets: int | None = Field(default=None, ge=1, le=MAX_STATE_BUCKETS)
    """Partitions are hashed into this many state buckets, one state value each. Every bucket that gets a
    sample costs a fixed share of each micro-batch, whatever its size (docs/benchmarks.md, "Streaming job": 256
    buckets took a third of the throughput of 32 on 2 cores, 16 5-31% more than 32). None (the default): the
    checkpoint's own count; a new checkpoint gets 8 per state task, at least 8 (streaming.buckets). Fixed for the
    life of a checkpoint: a job started on it with another count set is refused."""
    starting_offsets: Literal["earliest", "latest"] = "latest"
    """Where a job without a checkpoint starts reading the samples topic; later runs resume from the checkpoint."""
    max_offsets_per_trigger: int | None = Field(default=None, ge=1)
    """Kafka records a micro-batch reads at most (Spark's maxOffsetsPerTrigger); None: all there are. A batch
    record holds up to 2,000 samples, a JSON record one: a job catching up on a large backlog sets it
    (docs/deploy.md, "A backlog: catching up after downtime")."""
    read_tasks: int | None = Field(default=None, ge=1, le=100_000)
    """Spark tasks that read a micro-batch of the samples topic, at least (the Kafka source's minPartitions): with
    fewer partitions holding data, the larger ones are read by several tasks, each a range of offsets, so the read
    grows with executors past the topic's partition count. None (the default): one per core of the job (Spark's
    default parallelism when the query starts: local[N]'s N, or the executors' cores; streaming.source)."""
    kafka_jars_dir: Path | None = None
    """A directory holding spark-sql-kafka-0-10 and its dependencies, for sites without Maven Central."""
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=9464, ge=0, le=65535)
    """The job's /metrics port: 0 picks a free one (printed at start)."""
    series_budget: int = Field(default=5000, ge=0)
    """Per-partition series exported at most (unhealthy partitions first); aggregates are always exported."""
    stale_after_s: float = Field(default=30.0, gt=0)
    forget_after_s: float | None = Field(default=None, ge=0)
    """A partition with no sample for this long while its cluster's other partitions are sampled is forgotten
    (PARTITION_FORGOTTEN: its topic was deleted or left the collector's selection): its state and series are
    dropped, so a deleted topic stops counting as stale. None (the default): ten times stale_after_s; 0: never.
    A cluster whose samples stop as a whole keeps every partition."""
    hw_stalled_after_s: float = Field(default=30.0, gt=0)
    flapping_window_s: float = Field(default=300.0, gt=0)
    flapping_threshold: int = Field(default=4, ge=1)
    spark_conf: dict[str, str] = {}
    """Spark settings over the job's own (streaming.session); under spark-submit, its --conf win over both."""
    state_parallelism: int | None = Field(default=None, ge=1, le=10_000)
    """The state query's tasks (spark.sql.shuffle.partitions) for a new checkpoint; None: the cores the job gets
    (local[N]: N; else spark.cores.max, or spark.executor.instances x spark.executor.cores, else Spark's default
    parallelism). Independent of state_buckets: the buckets are spread evenly over the tasks. A checkpoint keeps
    the count it started with (docs/deploy.md, "Changing the state parallelism")."""
    driver_host: str | None = None
    """spark.driver.host, the address executors connect back to: 127.0.0.1 in local mode; off local mode, Spark's
    default (this host's name) unless set."""
    driver_bind_address: str | None = None
    """spark.driver.bindAddress: 127.0.0.1 in local mode; off local mode, Spark's default (all interfaces of
    driver_host) unless set."""
    code_archive: str = "auto"
    """How the executors get replmon's code off local mode: "auto" ships a zip of the running installation's
    packages through spark.archives (unpacked beside each executor, on its Python path); "none" when the
    executors' Python has replmon installed (the container image); or the path or URI of such a zip
    (`replmon package`)."""

    @model_validator(mode="after")
    def _forget_after_stale(self) -> StreamConfig:
        if self.forget_after_s and self.forget_after_s <= self.stale_after_s:
            raise ValueError(
                f"forget_after_s ({self.forget_after_s:g}) must be greater than stale_after_s "
                f"({self.stale_after_s:g}): a partition is stale before it is forgotten. Set it higher, or 0 to never "
                f"forget partitions")
        return self

    def forget_after(self) -> float:
        """Seconds of silence after which a partition is forgotten (0: never)."""
        return 10 * self.stale_after_s if self.forget_after_s is None else self.forget_after_s

    @field_validator("spark_master")
    @classmethod
    def _master(cls, value: str) -> str:
        """A master Spark would not read is refused here, not once Spark starts (replmon.core.spark_settings)."""
        if (problem := spark_settings.master_problem(value)) is not None:
            raise ValueError(problem)
        return value

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _spark_values(cls, value: Any) -> Any:
        """YAML's numbers and booleans as Spark spells them (``spark.executor.cores: 2``, ``...enabled: false``)."""
        if not isinstance(value, Mapping):
            return value
        return {key: spark_settings.setting_value(v) for key, v in value.items()}

    @field_validator("spark_conf")
    @classmethod
    def _spark_settings(cls, value: dict[str, str]) -> dict[str, str]:
        """A setting Spark would refuse, or replmon could not read (the master, the cores, the memory sizes), is
        refused here with its key, not once Spark starts."""
        problems = [f"{key}: {problem}" for key, v in value.items()
                    if (problem := spark_settings.setting_problem(key, v)) is not None]
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("checkpoint_dir", "history_dir", mode="before")
    @classmethod
    def _location(cls, value: Any) -> Any:
        """One spelling per place (replmon.core.locations): a path means the driver's disk, whatever Spark's
        fs.defaultFS says."""
        return locations.normalize(value) if isinstance(value, str | Path) else value


class GrafanaConfig(_Section):
    url: str = "http://127.0.0.1:3000"
    token: SecretStr | None = None
    folder: str = "replmon"

    @field_validator("url")
    @classmethod
    def _port(cls, value: str) -> str:
        """A port that is not a number from 0 to 65535 is refused here: urllib finds it out only when the URL is
        used (``dashboards push``). The URL is not echoed: it may carry a password."""
        try:
            _ = urlsplit(value).port
        except ValueError as exc:
            raise ValueError(f"not a valid URL: {exc}") from None
        return value


ENV_PREFIX = "REPLMON_"
ENV_NESTED = "__"


class ReplmonConfig(BaseSettings):
    # nested_model_default_partial_update: a section given as a model instance (a configuration built in code) is
    # merged with its environment overrides key by key, as a YAML mapping is, not replaced by them
    # env_parse_none_str: "null" in a variable is the YAML null, the documented "none" of optional settings
    # (REPLMON_COLLECTOR__METRICS_PORT=null serves no /metrics)
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_NESTED, extra="forbid",
                                      nested_model_default_partial_update=True, env_parse_none_str="null")

    clusters: list[ClusterConfig] = []
    collector: CollectorConfig = CollectorConfig()
    transport: TransportConfig = TransportConfig()
    stream: StreamConfig = StreamConfig()
    grafana: GrafanaConfig = GrafanaConfig()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (env_settings, init_settings)  # the environment overrides the YAML file

    @model_validator(mode="after")
    def _unique_names(self) -> ReplmonConfig:
        names = [c.name for c in self.clusters]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"cluster names must be unique: {', '.join(dupes)}")
        return self

    def samples_bootstrap(self) -> list[str]:
        if self.transport.bootstrap_servers:
            return self.transport.bootstrap_servers
        if not self.clusters:
            raise ReplmonError("no cluster configured and no transport.bootstrap_servers")
        return self.clusters[0].bootstrap_servers

    def samples_security(self) -> SecurityConfig:
        if self.transport.security is not None:
            return self.transport.security
        if self.transport.bootstrap_servers or not self.clusters:
            return SecurityConfig()
        return self.clusters[0].security


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error in one line: where (line and column, 1-based) and what, without its excerpt of the text
    (a caret under a line, meaningless on one line)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        context = f" ({exc.context})" if exc.context else ""
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}{context}"
    return " ".join(str(exc).split())


def load_config(path: Path | str | None = None, env: dict[str, str] | None = None) -> ReplmonConfig:
    """Load ``path`` (YAML) with environment overrides; every mistake becomes one clear ReplmonError."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path).expanduser()
        try:
            loaded = yaml.load(_config_text(p), Loader=_UniqueKeyLoader)
        except yaml.YAMLError as exc:
            raise ReplmonError(f"config file {p} is not valid YAML: {yaml_problem(exc)}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ReplmonError(f"config file {p} must hold a mapping at the top, not {type(loaded).__name__}")
        data = loaded
    environ = dict(os.environ if env is None else env)
    overrides = env_overrides(environ)
    unknown = [f"{name} names no setting: {why}" for name, path in overrides.items()
               if (why := _no_setting(ReplmonConfig, path)) is not None and ENV_NESTED in name]
    if unknown:
        raise ReplmonError("; ".join(unknown))
    saved = None
    if env is not None:
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
    try:
        return ReplmonConfig(**data)
    except SettingsError as exc:  # pydantic-settings could not decode a variable that takes JSON
        problems = _not_json(environ, overrides)
        raise ReplmonError("; ".join(problems) if problems else f"{exc}: {exc.__cause__}") from None
    except ValidationError as exc:
        sources = ([] if path is None else [str(path)]) + (
            ["environment " + ", ".join(sorted(overrides))] if overrides else [])
        where = ", ".join(sources) or "defaults"
        raise ReplmonError(f"invalid configuration ({where}): {format_validation_error(exc, overrides)}") from None
    finally:
        if saved is not None:
            os.environ.clear()
            os.environ.update(saved)


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last without a word:
    half of what the operator wrote would be lost)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # '<<: *defaults' may be overridden key by key, as YAML means it
            key = self.construct_object(key_node, deep=True)
            try:
                line = first.setdefault(key, key_node.start_mark.line)
            except TypeError:
                continue  # an unhashable key: the base class says so
            if line != key_node.start_mark.line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (first on line {line + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep)


OTHER_VARIABLES = ("REPLMON_STATE_DIR", "REPLMON_CACHE_DIR", "REPLMON_MAVEN_REPOSITORY", "REPLMON_DEBUG",
                   "REPLMON_DEMO_FAST", "REPLMON_ENTRYPOINT_DRY_RUN", "REPLMON_SPARKCLUSTER_WORKER")
"""The ``REPLMON_`` variables that are not settings: where state and downloads go, logging, the demo's pace, the
container's entry point and the test bed's workers."""


def misspelt_variables(environ: Mapping[str, str]) -> list[str]:
    """A ``REPLMON_`` variable that is neither a setting nor one of :data:`OTHER_VARIABLES` but close to one of
    them (``REPLMON_STATEDIR``): ignored, it would leave the operator's intent undone without a word. A variable
    close to none is another tool's and left alone. Checked once, by the command line for every command
    (:func:`replmon.cli.main.main`), whether it loads a configuration or not."""
    known = [*OTHER_VARIABLES, *(ENV_PREFIX + s.upper() for s in ReplmonConfig.model_fields)]
    problems = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or ENV_NESTED in name or upper in known:
            continue
        close = difflib.get_close_matches(upper, known, n=1, cutoff=0.85)
        if close:
            problems.append(f"{name} is no replmon variable (did you mean {close[0]}?)")
    return problems


def _config_text(p: Path) -> str:
    """The text of the config file ``p``: a regular file, or a pipe (``--config <(...)``, ``/dev/stdin``; not a
    file for :meth:`Path.is_file`); whatever else is there (a directory, a device) is refused for what it is."""
    if not os.path.exists(p):
        raise ReplmonError(f"config file {p} does not exist")
    try:
        mode = p.stat().st_mode
        if stat.S_ISDIR(mode):
            raise ReplmonError(f"config file {p} is a directory")
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise ReplmonError(f"config file {p} is not a regular file")
        raw = p.read_bytes()
    except OSError as exc:
        raise ReplmonError(f"cannot read config file {p}: {exc.strerror}") from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ReplmonError(f"config file {p} is not UTF-8 text (line {line}: byte {raw[exc.start]:#04x}, "
                           f"{exc.reason})") from None


_JSON_EXAMPLES = {
    ("clusters",): '[{"name": "prod", "bootstrap_servers": ["k1:9092"]}]',
    ("stream", "spark_conf"): '{"spark.executor.memory": "2g"}',
}
"""What a variable that takes a list or a mapping may hold, for the error that says its value is not JSON."""


def _not_json(environ: Mapping[str, str], overrides: Mapping[str, tuple[str, ...]]) -> list[str]:
    """Each variable of ``overrides`` that pydantic-settings decodes as JSON (:func:`_takes_json`) and whose value
    is not JSON: its name, JSON's reason (never the value: it may be a secret) and what the variable takes."""
    problems = []
    for name, path in sorted(overrides.items()):
        value = environ[name]
        takes = _takes_json(path)
        if takes is None or (not value and len(path) > 1):  # an empty nested variable is passed on as text
            continue
        try:
            json.loads(value)
        except ValueError as exc:
            problems.append(f"{name} is not valid JSON: {exc} (it takes {takes})")
    return problems


def _takes_json(path: tuple[str, ...]) -> str | None:
    """What the setting at ``path`` takes when pydantic-settings reads its variable as JSON: a list, a mapping or a
    section, not optional (an optional one's variable that is not JSON is passed on as text, and validation names
    it); None for any other setting."""
    model: type[BaseModel] = ReplmonConfig
    annotation: Any = None
    for i, part in enumerate(path):
        field = model.model_fields.get(part)
        if field is None:
            return None
        annotation = field.annotation
        if i < len(path) - 1:
            if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
                return None
            model = annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        first = next(((n, f.default) for n, f in annotation.model_fields.items()
                      if isinstance(f.default, str | int | float | bool)), None)
        if first is None:
            return f"a JSON object of {'.'.join(path)} settings"
        variable = ENV_PREFIX + ENV_NESTED.join((*path, first[0])).upper()
        return (f"a JSON object of {'.'.join(path)} settings such as {json.dumps(dict([first]))}, or one setting a "
                f"variable such as {variable}")
    if get_origin(annotation) is list:
        return f"a JSON list such as {_JSON_EXAMPLES.get(path, '[...]')}"
    if get_origin(annotation) is dict:
        return f"a JSON object such as {_JSON_EXAMPLES.get(path, '{...}')}"
    return None


def format_validation_error(exc: ValidationError, overrides: Mapping[str, tuple[str, ...]] | None = None) -> str:
    """'clusters.0.bootstrap_servers: Field required; ...' without echoing input values (they may be
    secrets); a setting an environment variable gave (``overrides``, :func:`env_overrides`) is named with it:
    'collector.interval_s (REPLMON_COLLECTOR__INTERVAL_S): ...', as the file does not hold that value."""
    parts = []
    for err in exc.errors(include_input=False, include_url=False):
        path = tuple(str(x) for x in err["loc"])
        loc = ".".join(path)
        given = [name for name, p in sorted((overrides or {}).items())
                 if path and (path[:len(p)] == p or p[:len(path)] == path)]
        if given:
            loc += f" ({', '.join(given)})"
        hint = _unknown_field_hint(path) if err["type"] == "extra_forbidden" else ""
        # a validator's own ValueError: its message as it wrote it, without pydantic's "Value error, "
        message = err["msg"].removeprefix("Value error, ") if err["type"] == "value_error" else err["msg"]
        parts.append(f"{loc}: {message}{hint}" if path else f"{message}{hint}")
    return "; ".join(parts)


def _section_models(annotation: Any) -> list[type[BaseModel]]:
    """The sections (models) a field holds: itself, optional or not, or the items of its list."""
    kinds = list(get_args(annotation)) if get_origin(annotation) in (Union, UnionType, list) else [annotation]
    return [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]


def _unknown_field_hint(path: tuple[str, ...]) -> str:
    """For a setting the section at ``path[:-1]`` does not have: the closest of its settings, or the section of
    it that has one of that name (``clusters.0.include`` -> ``topics.include``), else its settings."""
    model: type[BaseModel] = ReplmonConfig
    for part in path[:-1]:
        if part.isdigit():
            continue  # an item of a list of sections
        field = model.model_fields.get(part)
        sections = _section_models(field.annotation) if field is not None else []
        if not sections:
            return ""
        model = sections[0]
    name, fields = path[-1], model.model_fields
    close = difflib.get_close_matches(name, fields, n=1)
    if close:
        return f" (did you mean {close[0]}?)"
    nested = [f"{section}.{name}" for section, info in fields.items()
              if any(name in m.model_fields for m in _section_models(info.annotation))]
    if nested:
        return f" (did you mean {nested[0]}?)"
    return f" (the settings there: {', '.join(fields)})"


def env_overrides(environ: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """The environment variables that may override a setting (``REPLMON_<SECTION>__<FIELD>``, and
    ``REPLMON_<SECTION>`` for a whole section), each with the path it names, as pydantic-settings reads them
    (case-insensitive). Other ``REPLMON_`` variables (``REPLMON_STATE_DIR``, ``REPLMON_DEBUG``) name no section and
    are left out."""
    sections = set(ReplmonConfig.model_fields)
    out = {}
    for name in environ:
        if name.upper().startswith(ENV_PREFIX):
            path = tuple(name[len(ENV_PREFIX):].lower().split(ENV_NESTED))
            if ENV_NESTED in name or path[0] in sections:
                out[name] = path
    return out


def _no_setting(model: type[BaseModel], path: tuple[str, ...], where: tuple[str, ...] = ()) -> str | None:
    """Why ``path`` names no setting of ``model`` (the names there, and the closest), or None when it does. A
    path goes on into a section (a model, optional or not) and into a mapping's keys; not into a list, which is
    given whole, as JSON."""
    fields = model.model_fields
    head, rest = path[0], path[1:]
    field = fields.get(head)
    if field is None:
        close = difflib.get_close_matches(head, fields, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        if not where:
            return f"there is no section {head!r}{hint}; the sections: {', '.join(fields)}"
        return f"{'.'.join(where)} has no setting {head!r}{hint}; its settings: {', '.join(fields)}"
    if not rest:
        return None
    at = (*where, head)
    annotation = field.annotation
    kinds = list(get_args(annotation)) if get_origin(annotation) in (Union, UnionType) else [annotation]
    for kind in kinds:
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return _no_setting(kind, rest, at)
        if kind is dict or get_origin(kind) is dict:
            return None
        if kind is list or get_origin(kind) is list:
            return f"{'.'.join(at)} is a list, given whole as JSON ({ENV_PREFIX}{ENV_NESTED.join(at).upper()}='[...]')"
    return f"{'.'.join(at)} is one value, not a section"
