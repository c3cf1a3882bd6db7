"""A real Apache Kafka cluster (KRaft, one controller and N brokers) on 127.0.0.1, with fault injection.

Each node is a separate JVM started from the cached Maven classpath. The cluster directory holds one folder per
node (``server.properties``, ``data/``, ``server.log``) and ``cluster.json``, the state that lets ``status``,
``fault`` and ``down`` work from another process. Every JVM carries ``-Dreplmon.cluster=<dir>`` on its command
line, so that ``down`` finds and stops them even when the state file is lost or stale.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

import kafka.errors as Errors
from pydantic import BaseModel, ValidationError

from replmon.core.config import SecurityConfig, TransportConfig, format_validation_error
from replmon.core.errors import ReplmonError
from replmon.core.paths import replace_file, state_dir
from replmon.testbed.localcluster import artifacts, properties, secure
from replmon.testbed.localcluster.secure import LocalSecurity

START_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0


class NodeRole(StrEnum):
    CONTROLLER = "controller"
    BROKER = "broker"


class NodeState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"


class NodeSpec(BaseModel):
    node_id: int
    role: NodeRole
    port: int
    dir: Path
    pid: int | None = None
    mtls_port: int | None = None
    """A secure cluster's broker: the port of its mutual-TLS listener (:mod:`.secure`)."""

    @property
    def config_file(self) -> Path:
        return self.dir / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.dir / "server.log"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"


class ClusterSpec(BaseModel):
    """What ``cluster.json`` holds."""

    dir: Path
    cluster_id: str
    kafka_version: str
    nodes: list[NodeSpec]
    broker_overrides: dict[str, str] = {}
    broker_jvm_options: list[str] = []
    """JVM options of the brokers after the defaults (:func:`.properties.jvm_options`), which they override:
    the collector's benchmark runs its brokers with a larger heap and the full JIT."""
    security: LocalSecurity | None = None
    """Set for a cluster started with ``--secure`` (SASL_SSL, SCRAM-SHA-512, ACLs): :mod:`.secure`."""


class UnreadableCluster(ReplmonError):
    """A ``cluster.json`` that is not a local cluster's description (damaged, another program's, a directory):
    only ``down --purge`` (:func:`purge_cluster_dir`) can act on its directory."""


def read_spec(state_file: Path) -> ClusterSpec:
    """The cluster ``state_file`` (a ``cluster.json``) describes; :class:`UnreadableCluster` when it describes
    none, saying why and how to remove it."""
    try:
        return ClusterSpec.model_validate_json(state_file.read_bytes())
    except ValidationError as exc:
        reason = format_validation_error(exc)
    except OSError as exc:
        reason = exc.strerror or str(exc)
    raise UnreadableCluster(f"{state_file} is not a local cluster's description ({reason}); "
                            f"`replmon cluster down --dir {state_file.parent} --purge` removes it")


class NodeStatus(BaseModel):
    node_id: int
    role: NodeRole
    pid: int | None
    state: NodeState
    listener: str
    log_dir: Path


def default_cluster_dir() -> Path:
    return state_dir() / "clusters" / "default"


def _last_pointer() -> Path:
    return state_dir() / "last-cluster"


def resolve_cluster_dir(path: Path | str | None) -> Path:
    """``path`` if given, else the cluster ``up`` started last, else the default location."""
    if path is not None:
        return Path(path).expanduser().resolve()
    pointer = _last_pointer()
    if pointer.exists():
        return Path(pointer.read_text().strip())
    return default_cluster_dir().resolve()


def cluster_dir_to_start(path: Path | str | None) -> Path | None:
    """Where ``up`` starts the cluster of a command given ``path`` (``--cluster-dir``): that directory, made there
    on first use; else the cluster ``up`` started last, when it is still there; else None (the default
    directory)."""
    if path is not None:
        return Path(path).expanduser().resolve()
    last = resolve_cluster_dir(None)
    return last if (last / "cluster.json").exists() else None


REGISTRATION_PROBE_TIMEOUT_MS = 5000
"""A bootstrap on loopback answers within this, TLS and SCRAM included, or the probe is tried again."""


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
"""The kernel's ephemeral ports: where bind(0) picks, and where every outgoing connection takes its local port."""
PORT_SPAN = 16_384
"""How many ports below the ephemeral range :func:`free_port` picks from."""
_ports_given: set[int] = set()
_port_picker = random.Random()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now, for a server that binds it later: one of the :data:`PORT_SPAN` ports below
    the ephemeral range, at random, never one this process gave before. A port bind(0) gives is in the ephemeral
    range, where any outgoing connection (a Kafka client's) may take it before its server binds it: a job's metrics
    port was lost so. Below the range only an explicit bind takes a port. Where the range starts too low for that,
    bind(0)'s port."""
    start = _ephemeral_start()
    first = max(1024, start - PORT_SPAN)
    for _ in range(1000 if start - first >= 1000 else 0):
        port = _port_picker.randrange(first, start)
        if port in _ports_given:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _ports_given.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _ephemeral_start() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def new_cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """Kafka's cluster id format: a random UUID, URL-safe base64 without padding (22 characters). Like Kafka's
    ``Uuid.randomUuid()``, never one that starts with '-': kafka-storage.sh would read it as an option (one
    random id in 64 starts so)."""
    while True:
        text = base64.urlsafe_b64encode(random_bytes()).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def marker(cluster_dir: Path) -> str:
    return f"-Dreplmon.cluster={cluster_dir}"


def _proc_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _proc_state(pid: int) -> str | None:
    """The one-letter state of /proc/PID/stat (R, S, T, Z, ...), None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2]


def cluster_pids(cluster_dir: Path) -> list[int]:
    """Every live process whose command line carries this cluster's marker."""
    tag = marker(cluster_dir) + " "
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and tag in _proc_cmdline(int(entry.name)) + " ":
            state = _proc_state(int(entry.name))
            if state is not None and state != "Z":
                pids.append(int(entry.name))
    return pids


def _reap(pid: int) -> None:
    """Collect a child's exit status, when the process is our own child (a no-op otherwise)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """prctl(PR_SET_PDEATHSIG, SIGKILL): the node dies when the process that started it dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def _log_excerpt(path: Path) -> str:
    """What explains a node's death: its first ERROR lines with their causes, then the last lines."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    first_errors = [line for line in text if " ERROR " in line or line.startswith("Caused by:")][:6]
    return "\n".join([*first_errors, "...", *text[-5:]]) if first_errors else "\n".join(text[-15:])


class LocalCluster:
    """One local cluster, identified by its directory. Use :meth:`up` to start one, :meth:`open` to attach."""

    def __init__(self, spec: ClusterSpec, die_with_parent: bool = False) -> None:
        self.spec = spec
        self.die_with_parent = die_with_parent

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def up(
        cls,
        cluster_dir: Path | str | None = None,
        brokers: int = 3,
        overrides: Mapping[str, str] | None = None,
        die_with_parent: bool = False,
        timeout_s: float = START_TIMEOUT_S,
        on_progress: Callable[[str], None] = lambda _msg: None,
        remember: bool = True,
        secure: bool = False,
        broker_jvm_options: Sequence[str] = (),
    ) -> LocalCluster:
        """Start the cluster in ``cluster_dir`` (created and formatted on first use) and wait until every
        broker is registered and unfenced. On any failure nothing of it is left running. ``secure`` creates
        a SASL_SSL/SCRAM cluster with ACLs enforced (:mod:`replmon.testbed.localcluster.secure`); an existing cluster
        keeps the security it was created with."""
        if brokers < 1:
            raise ReplmonError(f"--brokers must be at least 1, not {brokers}")
        cdir = Path(cluster_dir).expanduser().resolve() if cluster_dir else default_cluster_dir().resolve()
        java = artifacts.java_executable()
        on_progress(f"resolving Apache Kafka {artifacts.KAFKA_VERSION} (Maven Central, cached)")
        libs = artifacts.kafka_libs()
        state_file = cdir / "cluster.json"
        if state_file.exists():
            cluster = cls(read_spec(state_file), die_with_parent)
            if secure and cluster.spec.security is None:
                raise ReplmonError(f"the local cluster in {cdir} was created without --secure: choose another "
                                   "--dir, or delete it with `replmon cluster down --purge`")
            running = [s for s in cluster.status() if s.state != NodeState.STOPPED]
            if len(running) == len(cluster.spec.nodes):
                cluster.resume_all()
                if remember:
                    cluster._remember()
                return cluster
            if running:
                cluster.down()
            if overrides:
                cluster.spec.broker_overrides.update(overrides)
                cluster._write_configs()
        else:
            cluster = cls._create(cdir, brokers, dict(overrides or {}), die_with_parent, secure)
            cluster.spec.broker_jvm_options = list(broker_jvm_options)
            on_progress(f"formatting storage of {len(cluster.spec.nodes)} nodes in {cdir}")
            cluster._format(java, libs)
        try:
            on_progress("starting controller and brokers")
            for node in cluster.spec.nodes:
                cluster._start_node(node, java, libs)
            cluster.wait_until_registered(cluster.broker_ids, timeout_s=timeout_s)
            if cluster.spec.security is not None:
                on_progress("granting each role its ACLs")
                cluster.grant_roles()
        except BaseException:
            cluster.down()
            raise
        if remember:  # `status`, `fault`, `down` and the default target of the other commands use it
            cluster._remember()
        return cluster

    @classmethod
    def open(cls, cluster_dir: Path | str | None = None) -> LocalCluster:
        cdir = resolve_cluster_dir(cluster_dir)
        state_file = cdir / "cluster.json"
        if not state_file.exists():
            raise ReplmonError(f"no local cluster in {cdir}: start one with `replmon cluster up`")
        return cls(read_spec(state_file))

    @classmethod
    def _create(
        cls, cdir: Path, brokers: int, overrides: dict[str, str], die_with_parent: bool, secure_: bool = False
    ) -> LocalCluster:
        if cdir.exists() and any(cdir.iterdir()):
            raise ReplmonError(f"{cdir} is not empty and holds no replmon cluster: choose another --dir")
        cdir.mkdir(parents=True, exist_ok=True)
        ports: set[int] = set()
        while len(ports) < (brokers + 1) * (2 if secure_ else 1):
            ports.add(free_port())
        port_list = sorted(ports)
        nodes = [NodeSpec(node_id=properties.CONTROLLER_ID, role=NodeRole.CONTROLLER, port=port_list[0],
                          dir=cdir / "controller")]
        nodes += [NodeSpec(node_id=i, role=NodeRole.BROKER, port=port_list[i], dir=cdir / f"broker-{i}",
                           mtls_port=port_list[brokers + i] if secure_ else None)
                  for i in range(1, brokers + 1)]
        spec = ClusterSpec(dir=cdir, cluster_id=new_cluster_id(), kafka_version=artifacts.KAFKA_VERSION,
                           nodes=nodes, broker_overrides={**properties.sized_defaults(brokers), **overrides},
                           security=secure.create(cdir) if secure_ else None)
        cluster = cls(spec, die_with_parent)
        cluster._write_configs()
        return cluster

    def _write_configs(self) -> None:
        controller = self.node(properties.CONTROLLER_ID)
        (self.spec.dir / "log4j2.properties").write_text(properties.LOG4J2)
        for node in self.spec.nodes:
            node.dir.mkdir(parents=True, exist_ok=True)
            sec = self.spec.security
            if node.role == NodeRole.CONTROLLER:
                props = properties.controller_properties(node.port, node.data_dir, self.spec.broker_overrides)
                props.update(secure.controller_props(sec) if sec else {})
            else:
                props = properties.broker_properties(node.node_id, node.port, controller.port, node.data_dir,
                                                     self.spec.broker_overrides)
                props.update(secure.broker_props(sec, node.port, node.mtls_port) if sec else {})
            if sec is None:
                node.config_file.write_text(properties.render(props))
            else:  # it holds the inter-broker password
                secure.write_secret(node.config_file, properties.render(props))
        self._save()

    def _java_cmd(self, java: str, libs: Path, heap: str, main: str, *args: str,
                  extra: Sequence[str] = ()) -> list[str]:
        return [java, *properties.jvm_options(heap), *extra, marker(self.spec.dir),
                f"-Dlog4j2.configurationFile={self.spec.dir / 'log4j2.properties'}",
                "-cp", f"{libs}/*", main, *args]

    def _format(self, java: str, libs: Path) -> None:
        procs = []
        scram = secure.scram_format_args(self.spec.security) if self.spec.security else []
        for node in self.spec.nodes:
            cmd = self._java_cmd(java, libs, "256m", "kafka.tools.StorageTool", "format",
                                 "-t", self.spec.cluster_id, "-c", str(node.config_file), *scram)
            log = (node.dir / "format.log").open("w")
            procs.append((node, log, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                      stdin=subprocess.DEVNULL)))
        failed = []
        for node, log, proc in procs:
            proc.wait(timeout=180)
            log.close()
            if proc.returncode != 0:
                failed.append(f"node {node.node_id}: {_log_tail(node.dir / 'format.log', 5)}")
        if failed:
            raise ReplmonError("formatting the storage failed: " + "; ".join(failed))

    def node_command(self, node: NodeSpec, java: str, libs: Path) -> list[str]:
        """The command line that runs ``node``."""
        heap = properties.CONTROLLER_HEAP if node.role == NodeRole.CONTROLLER else properties.BROKER_HEAP
        extra = self.spec.broker_jvm_options if node.role == NodeRole.BROKER else ()
        return self._java_cmd(java, libs, heap, "kafka.Kafka", str(node.config_file), extra=extra)

    def _start_node(self, node: NodeSpec, java: str, libs: Path) -> None:
        cmd = self.node_command(node, java, libs)
        with node.log_file.open("a") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=node.dir,
                start_new_session=True, preexec_fn=die_with_parent if self.die_with_parent else None,
            )
        node.pid = proc.pid
        self._save()

    def _save(self) -> None:
        replace_file(self.spec.dir / "cluster.json", self.spec.model_dump_json(indent=2))

    def _remember(self) -> None:
        pointer = _last_pointer()
        pointer.parent.mkdir(parents=True, exist_ok=True)
        pointer.write_text(str(self.spec.dir) + "\n")

    def down(self, purge: bool = False) -> list[int]:
        """Stop every process of this cluster (SIGTERM, then SIGKILL after a grace period); with ``purge``
        delete its directory. Returns the pids that were stopped."""
        pids = cluster_pids(self.spec.dir)
        brokers = [p for p in pids if p != self._pid_of(properties.CONTROLLER_ID)]
        # brokers first: they finish their controlled shutdown while the controller still answers
        self._terminate(brokers, grace_s=STOP_GRACE_S)
        self._terminate(cluster_pids(self.spec.dir), grace_s=STOP_GRACE_S)
        for node in self.spec.nodes:
            node.pid = None
        if purge:
            _delete(self.spec.dir)
        elif self.spec.dir.exists():
            self._save()
        return pids

    @staticmethod
    def _terminate(pids: Iterable[int], grace_s: float) -> None:
        pids = list(pids)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)  # a paused JVM cannot act on SIGTERM
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        alive = pids
        while alive and time.monotonic() < deadline:
            for pid in alive:
                _reap(pid)
            alive = [p for p in alive if _proc_state(p) not in (None, "Z")]
            if alive:
                time.sleep(0.1)
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            _wait_gone(pid, 10.0)

    # ------------------------------------------------------------------ inspection
    @property
    def bootstrap_servers(self) -> str:
        return _addresses(n for n in self.spec.nodes if n.role == NodeRole.BROKER)

    @property
    def mtls_bootstrap_servers(self) -> str:
        """A secure cluster's mutual-TLS listeners (clients authenticated by certificate:
        ``client_security(user, mtls=True)``)."""
        brokers = [n for n in self.spec.nodes if n.role == NodeRole.BROKER]
        if self.spec.security is None or any(n.mtls_port is None for n in brokers):
            raise ReplmonError(f"the local cluster in {self.spec.dir} has no mutual-TLS listener: it is not secure, "
                               "or was created before such listeners")
        return _addresses(brokers, mtls=True)

    @property
    def live_bootstrap_servers(self) -> str:
        """The brokers running now (neither stopped nor paused), for a short-lived client during a fault; all of
        them when none runs. kafka-python picks a bootstrap server at random and waits out a dead one's growing
        backoff rather than trying another: with 2 of 3 brokers down, a consumer given all three can fail to
        bootstrap within its 30 s (it may draw a dead one try after try)."""
        brokers = [n for n in self.spec.nodes if n.role == NodeRole.BROKER]
        live = [n for n in brokers if self.node_state(n.node_id) == NodeState.RUNNING]
        return _addresses(live or brokers)

    @property
    def broker_ids(self) -> list[int]:
        return [n.node_id for n in self.spec.nodes if n.role == NodeRole.BROKER]

    @property
    def dir(self) -> Path:
        return self.spec.dir

    def node(self, node_id: int) -> NodeSpec:
        for node in self.spec.nodes:
            if node.node_id == node_id:
                return node
        raise ReplmonError(f"no node {node_id} in the cluster at {self.spec.dir} (brokers: {self.broker_ids})")

    def broker(self, broker_id: int) -> NodeSpec:
        node = self.node(broker_id)
        if node.role != NodeRole.BROKER:
            raise ReplmonError(f"node {broker_id} is the controller; faults target brokers {self.broker_ids}")
        return node

    def broker_log_dir(self, broker_id: int) -> Path:
        return self.broker(broker_id).data_dir

    def _pid_of(self, node_id: int) -> int | None:
        node = self.node(node_id)
        if node.pid is None:
            return None
        _reap(node.pid)
        if _proc_state(node.pid) in (None, "Z") or marker(self.spec.dir) not in _proc_cmdline(node.pid):
            return None
        return node.pid

    def node_state(self, node_id: int) -> NodeState:
        pid = self._pid_of(node_id)
        if pid is None:
            return NodeState.STOPPED
        return NodeState.PAUSED if _proc_state(pid) in ("T", "t") else NodeState.RUNNING

    def status(self) -> list[NodeStatus]:
        result = []
        for node in self.spec.nodes:
            state = self.node_state(node.node_id)
            listener = self.listener(node)
            result.append(NodeStatus(node_id=node.node_id, role=node.role,
                                     pid=node.pid if state != NodeState.STOPPED else None,
                                     state=state, listener=listener, log_dir=node.data_dir))
        return result

    @property
    def protocol(self) -> str:
        """The brokers' security protocol: PLAINTEXT, or SASL_SSL for a secure cluster."""
        return self.spec.security.protocol if self.spec.security else "PLAINTEXT"

    def listener(self, node: NodeSpec) -> str:
        if node.role == NodeRole.CONTROLLER:
            name = "CONTROLLER" + (f"({self.spec.security.controller_protocol})" if self.spec.security else "")
        else:
            name = self.protocol
        return f"{name}://127.0.0.1:{node.port}"

    def client_security(self, user: str | None = None, mtls: bool = False) -> SecurityConfig:
        """replmon's security settings for ``user`` (default: the admin) on this cluster; PLAINTEXT when the
        cluster is not secure. ``mtls``: by the user's client certificate, for :attr:`mtls_bootstrap_servers`."""
        if self.spec.security is None:
            return SecurityConfig()
        return secure.client_security(self.spec.security, user or self.spec.security.admin_user, mtls)

    def admin_client(self, request_timeout_ms: int = 3000, bootstrap_timeout_ms: int = 30_000) -> Any:
        """A kafka-python admin client as the cluster's admin (a super user of a secure cluster)."""
        from kafka.admin import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.live_bootstrap_servers, request_timeout_ms=request_timeout_ms,
                                bootstrap_timeout_ms=bootstrap_timeout_ms, client_id="replmon-localcluster",
                                **self.client_security().kafka_python())

    def grant_roles(self, transport: TransportConfig | None = None) -> None:
        """Give each role's user (replmon.core.security.Role) its grants, for the topic names of ``transport``
        (default: replmon's default names)."""
        from replmon.core import security

        transport = transport or TransportConfig()
        admin = self.admin_client(request_timeout_ms=10_000)
        try:
            for role in security.Role:
                security.create_acls(admin, security.acl_objects(security.grants(role), transport, f"User:{role}"))
        finally:
            admin.close()

    def registered_brokers(self) -> set[int]:
        """Brokers the cluster's metadata lists: registered and unfenced. The bootstrap gives up after
        REGISTRATION_PROBE_TIMEOUT_MS: something else listening on a broker's port accepts the connection and never
        answers, and kafka-python's default (30 s) would hold :meth:`wait_until_registered` from seeing the broker
        die of it."""
        admin = self.admin_client(bootstrap_timeout_ms=REGISTRATION_PROBE_TIMEOUT_MS)
        try:
            return {int(b["broker_id"]) for b in admin.describe_cluster()["brokers"]}
        finally:
            admin.close()

    def listening(self, broker_id: int) -> bool:
        """The broker's listener accepts connections. A broker registers and is unfenced a moment before it
        opens its listener (after a restart of an existing cluster, a client's first request can be refused)."""
        try:
            with socket.create_connection(("127.0.0.1", self.broker(broker_id).port), timeout=2):
                return True
        except OSError:
            return False

    def wait_until_registered(self, broker_ids: Iterable[int], timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until each of ``broker_ids`` is registered, unfenced and accepts connections; fail early with the
        log of a node that died while starting."""
        wanted = set(broker_ids)
        deadline = time.monotonic() + timeout_s
        last_error = ""
        while True:
            for node in self.spec.nodes:
                watched = node.node_id in wanted or node.role == NodeRole.CONTROLLER
                if watched and node.pid is not None and self._pid_of(node.node_id) is None:
                    raise ReplmonError(
                        f"{node.role} {node.node_id} died while starting; from {node.log_file}:\n"
                        + _log_excerpt(node.log_file)
                    )
            try:
                if wanted <= self.registered_brokers() and all(self.listening(b) for b in wanted):
                    return
            except Exception as exc:  # the brokers are not answering yet
                last_error = str(exc)
            if time.monotonic() > deadline:
                raise ReplmonError(
                    f"brokers {sorted(wanted)} not registered and unfenced after {timeout_s:.0f}s"
                    + (f" ({last_error})" if last_error else "")
                )
            time.sleep(0.5)

    # ------------------------------------------------------------------ faults
    def _signal(self, broker_id: int, sig: signal.Signals) -> int:
        self.broker(broker_id)
        pid = self._pid_of(broker_id)
        if pid is None:
            raise ReplmonError(f"broker {broker_id} is not running")
        os.kill(pid, sig)
        return pid

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the broker stops fetching and heartbeating but keeps its sockets open. Returns once the kernel
        shows it stopped (a signal is delivered asynchronously), so ``node_state`` says PAUSED from then on."""
        _wait_stopped(self._signal(broker_id, signal.SIGSTOP), True, 10.0)

    def resume(self, broker_id: int) -> None:
        """SIGCONT; returns once the broker no longer shows as stopped."""
        _wait_stopped(self._signal(broker_id, signal.SIGCONT), False, 10.0)

    def resume_all(self) -> None:
        for broker_id in self.broker_ids:
            if self.node_state(broker_id) == NodeState.PAUSED:
                self.resume(broker_id)

    def kill(self, broker_id: int) -> None:
        """SIGKILL: an abrupt crash; the log is recovered on restart."""
        pid = self._signal(broker_id, signal.SIGKILL)
        _wait_gone(pid, 10.0)

    def stop(self, broker_id: int, timeout_s: float = 30.0) -> None:
        """SIGTERM: a controlled shutdown (the broker leaves ISRs and hands over leadership first)."""
        self.broker(broker_id)
        pid = self._pid_of(broker_id)
        if pid is None:
            raise ReplmonError(f"broker {broker_id} is not running")
        self._terminate([pid], grace_s=timeout_s)

    def start(self, broker_id: int, wait: bool = True, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start a stopped broker again with the same configuration and log dir."""
        node = self.broker(broker_id)
        if self._pid_of(broker_id) is not None:
            raise ReplmonError(f"broker {broker_id} is already running (pid {node.pid})")
        self._start_node(node, artifacts.java_executable(), artifacts.kafka_libs(self.spec.kafka_version))
        if wait:
            self.wait_until_registered([broker_id], timeout_s=timeout_s)

    def restart(self, broker_id: int, timeout_s: float = START_TIMEOUT_S) -> None:
        """Stop the broker if it runs (resuming it first if paused), then start it with the same log dir."""
        if self._pid_of(broker_id) is not None:
            self.stop(broker_id)
        self.start(broker_id, timeout_s=timeout_s)

    def heal(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Bring every broker back: resume the paused ones, start the stopped ones, wait for all."""
        self.resume_all()
        java = libs = None
        for broker_id in self.broker_ids:
            if self._pid_of(broker_id) is None:
                java = java or artifacts.java_executable()
                libs = libs or artifacts.kafka_libs(self.spec.kafka_version)
                self._start_node(self.broker(broker_id), java, libs)
        self.wait_until_registered(self.broker_ids, timeout_s=timeout_s)

    def elect_unclean(self, topic: str, partition: int, timeout_s: float = 30.0) -> None:
        """Force an unclean leader election (ElectLeaders, type UNCLEAN) for one partition: a live replica
        outside the ISR may become leader and the partition loses what only the old leader had. A cluster with no
        broker running is told at once, not after the admin client's bootstrap gives up."""
        if all(self.node_state(b) != NodeState.RUNNING for b in self.broker_ids):
            raise ReplmonError(f"the local cluster in {self.spec.dir} is not running")
        try:
            admin = self.admin_client(request_timeout_ms=10_000)
        except Errors.KafkaError as exc:
            raise ReplmonError(f"unclean election of {topic}-{partition} failed: {exc}") from None
        try:
            response = admin.elect_leaders(1, {topic: [partition]}, timeout_ms=int(timeout_s * 1000),
                                           raise_errors=False)
        except Exception as exc:
            raise ReplmonError(f"unclean election of {topic}-{partition} failed: {exc}") from exc
        finally:
            admin.close()
        # the controller's answer, then each partition's: an election not needed (a leader in the ISR) is no error
        answers = [(response.error_code, None)] + [(p.error_code, p.error_message)
                                                    for r in response.replica_election_results
                                                    for p in r.partition_result]
        for code, message in answers:
            if code not in (0, Errors.ElectionNotNeededError.errno):
                error = Errors.for_code(code)
                raise ReplmonError(f"unclean election of {topic}-{partition} failed: "
                                   f"{getattr(error, 'message', error.__name__)}" + (f": {message}" if message else ""))

    def describe(self) -> dict[str, Any]:
        return json.loads(self.spec.model_dump_json())


def purge_cluster_dir(cluster_dir: Path) -> list[int]:
    """``down --purge`` of a directory whose ``cluster.json`` is unreadable (:class:`UnreadableCluster`): stop
    the processes that carry its marker (every JVM of a cluster does), then delete it. Returns their pids."""
    pids = cluster_pids(cluster_dir)
    LocalCluster._terminate(pids, grace_s=STOP_GRACE_S)
    _delete(cluster_dir)
    return pids


def _delete(cluster_dir: Path) -> None:
    """Delete a cluster's directory, and the pointer to it as the cluster ``up`` started last."""
    shutil.rmtree(cluster_dir, ignore_errors=True)
    pointer = _last_pointer()
    if pointer.exists() and pointer.read_text().strip() == str(cluster_dir):
        pointer.unlink()


def _addresses(nodes: Iterable[NodeSpec], mtls: bool = False) -> str:
    """A bootstrap list: the loopback address of each node's port (``mtls``: of its mutual-TLS listener)."""
    return ",".join(f"127.0.0.1:{n.mtls_port if mtls else n.port}" for n in nodes)


def _wait_stopped(pid: int, stopped: bool, timeout_s: float) -> None:
    """Until the process shows as stopped by a signal (or no longer does, ``stopped`` False)."""
    deadline = time.monotonic() + timeout_s
    while (_proc_state(pid) in ("T", "t")) != stopped:
        if time.monotonic() > deadline:
            raise ReplmonError(f"process {pid} did not {'stop' if stopped else 'continue'} within {timeout_s:.0f}s")
        time.sleep(0.01)


def _wait_gone(pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _reap(pid)
        if _proc_state(pid) in (None, "Z"):
            return
        time.sleep(0.05)
    raise ReplmonError(f"process {pid} did not exit within {timeout_s:.0f}s")
