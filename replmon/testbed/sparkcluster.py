"""A real Spark standalone cluster on 127.0.0.1 (one master, N workers), for tests that need executors in other
processes than the driver, as on a real cluster, and the faults of one (a worker killed).

The JVMs are started by the pip-installed pyspark package's own launcher (``bin/spark-class``, with SPARK_HOME set
to the package's directory, which holds ``bin/`` and ``jars/``): no Spark distribution is downloaded.

Each worker runs in a mount namespace of its own (``unshare --mount --propagation private``), where a short shell
prologue (:data:`PROLOGUE`) gives it a private ``/tmp`` (a tmpfs) and hides the project's source tree under an
empty tmpfs, with only the virtualenv mounted back in its place. The worker and its executors (its child
processes, which inherit the namespace) thus see what the executors of a real cluster see: the venv's interpreter
and site-packages, like a Spark image, but neither the project's code (the editable install's path finder points
into the hidden tree, so ``import streaming`` fails there) nor the files the driver writes in ``/tmp``. A job
that only passes because its executors share the driver's file system or source tree fails here.

Each JVM is the leader of a session of its own: stopping or killing a worker ends every process of its session,
executors and their Python workers included (pyspark's daemon moves itself to a process group of its own, but
stays in the session).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import pyspark

from replmon.core.errors import ReplmonError
from replmon.core.processes import wait_until
from replmon.testbed.localcluster.cluster import _log_excerpt, _log_tail, die_with_parent

SPARK_HOME = Path(pyspark.__file__).resolve().parent
"""The pip-installed pyspark package: it holds ``bin/spark-class`` and the Spark jars."""

START_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
DAEMON_MEMORY = "256m"
"""The heap of the master and worker JVMs (SPARK_DAEMON_MEMORY); executors get what the application asks for."""

LEAN_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError"
"""For the daemons and spark-class's launcher JVM (and, from the caller, the executors: ``spark.executor.
extraJavaOptions``): C1-only JIT and a single-threaded GC, so that the cluster's JVMs start fast on few cores."""

WORKER_ENV = "REPLMON_SPARKCLUSTER_WORKER"
"""Set to the worker's index in the environment of each worker JVM; its executors and their Python workers
inherit it, so a task can tell which worker it runs on (all of them are 127.0.0.1)."""

PRIVATE = "/tmp/sparkcluster"
"""Inside a worker's namespace, its own folder on its private /tmp: ``work/`` (the worker's work dir, bind-mounted
from the host so that the executors' logs outlive it) and ``local/`` (SPARK_LOCAL_DIRS: shuffle and block files,
on the tmpfs only)."""

PROLOGUE = r"""set -eu
stage=$1 root=$2 work=$3 venv=$4
shift 4
# a fresh tmpfs, staged on a mount point of the worker's own: it becomes the worker's /tmp
mount -t tmpfs -o mode=1777 sparkcluster-tmp "$stage"
mkdir -p "$stage/sparkcluster/work" "$stage/sparkcluster/local"
# what must stay visible once the host's /tmp and the source tree are hidden: the work dir and the venv
mount --bind "$work" "$stage/sparkcluster/work"
if [ -n "$venv" ]; then
  mkdir "$stage/sparkcluster/venv"
  mount --bind "$venv" "$stage/sparkcluster/venv"
fi
mount --move "$stage" /tmp
# the source tree goes under an empty tmpfs (a tree under the host's /tmp is already gone with it), and the venv
# back in its place
if [ -d "$root" ]; then
  mount -t tmpfs -o mode=755 sparkcluster-src "$root"
fi
if [ -n "$venv" ]; then
  mkdir -p "$venv"
  mount --bind /tmp/sparkcluster/venv "$venv"
  umount /tmp/sparkcluster/venv
  rmdir /tmp/sparkcluster/venv
fi
cd /
exec "$@"
"""
"""Run by ``sh -c`` in the worker's new mount namespace (private propagation: none of it is seen outside), with
the arguments: a mount point for staging (an empty folder of the worker's, on the host), the source tree to hide,
the worker's work dir on the host, the venv to keep (empty when it is not inside the source tree), then the
command to ``exec``. The tmpfs of the private /tmp is staged elsewhere and moved onto /tmp at once, since once
/tmp is covered neither the work dir nor the staging point (both may be under the host's /tmp) can be reached.
A source tree under the host's /tmp (a CI checkout) is hidden by the move itself; its venv is mounted back at
its path inside the private /tmp.
``cd /`` leaves no handle on the hidden tree: a process whose working directory is inside it would still reach
it by relative paths."""


def source_root() -> Path:
    """The project's source tree (the repository root): the parent of the ``replmon`` package."""
    return Path(__file__).resolve().parents[2]


def _session_pids(sid: int) -> list[int]:
    """Every live (not zombie) process of session ``sid``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, _ppid, _pgrp, session = stat[stat.rindex(")") + 2:].split()[:4]
        if int(session) == sid and state != "Z":
            pids.append(int(entry.name))
    return pids


def _signal_session(sid: int, sig: signal.Signals) -> None:
    """``sig`` to the session's leading process group at once, then to every other process of the session."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(sid, sig)
    for pid in _session_pids(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def end_session(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """Stop the session ``proc`` leads (it was started with ``start_new_session``): SIGTERM to each of its
    processes, SIGKILL to those left after ``grace_s`` (none with ``grace_s`` 0: SIGKILL at once); returns once
    none is left and ``proc`` is reaped."""
    def gone() -> bool:
        return proc.poll() is not None and not _session_pids(proc.pid)

    if gone():  # already ended (a killed worker): its id may be another process's by now
        return
    if grace_s > 0:
        _signal_session(proc.pid, signal.SIGTERM)
        with contextlib.suppress(AssertionError):
            wait_until(gone, grace_s, f"session {proc.pid} to end on SIGTERM", interval_s=0.05)
    if not gone():
        _signal_session(proc.pid, signal.SIGKILL)
        wait_until(gone, 10.0, f"session {proc.pid} to end on SIGKILL", interval_s=0.05)


@dataclass
class _Daemon:
    """A master or worker JVM: its folder on the host, its log, and its process while one runs."""

    name: str
    dir: Path
    proc: subprocess.Popen[bytes] | None = None
    log_offset: int = 0
    """Where the log of the current run starts (a restarted worker appends to the same log)."""

    @property
    def log(self) -> Path:
        return self.dir / f"{self.name}.log"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        """The log of the current run."""
        try:
            with self.log.open("rb") as f:
                f.seek(self.log_offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""


class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers of ``cores`` cores and ``memory`` each (Spark's
    notation: ``1g``, ``512m``), with logs and work dirs under ``base_dir``: ``master/master.log``,
    ``worker-I/worker.log``, ``worker-I/work/`` (the executors' stdout and stderr). Use it as a context manager,
    or call :meth:`start` and :meth:`stop`.

    ``root`` is the tree hidden from the workers (default: this project's source tree); ``venv`` the Python
    environment they keep (default: the running interpreter's, ``sys.prefix``), mounted back in place when it
    lies inside ``root``."""

    def __init__(self, base_dir: Path | str, workers: int = 2, cores: int = 1, memory: str = "1g", *,
                 root: Path | None = None, venv: Path | None = None, timeout_s: float = START_TIMEOUT_S,
                 die_with_parent: bool = True) -> None:
        if workers < 1:
            raise ReplmonError(f"a standalone cluster needs at least 1 worker, not {workers}")
        self.base_dir = Path(base_dir).resolve()
        self.cores = cores
        self.memory = memory
        self.root = (root or source_root()).resolve()
        self.venv = (venv or Path(sys.prefix)).resolve()
        self.timeout_s = timeout_s
        self.die_with_parent = die_with_parent
        if self.root == Path("/") or not self.root.is_dir():
            raise ReplmonError(f"cannot hide {self.root} from the workers: not a folder other than /")
        self.master = _Daemon("master", self.base_dir / "master")
        self.workers = [_Daemon("worker", self.base_dir / f"worker-{i}") for i in range(workers)]
        self._master_url: str | None = None
        self._web_ui_port: int | None = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> StandaloneCluster:
        """Start the master, then every worker, and return once the master counts them all ALIVE. On any
        failure nothing of the cluster is left running."""
        if shutil.which("unshare") is None:
            raise ReplmonError("the standalone cluster's workers need unshare(1) (util-linux)")
        try:
            self._start_master()
            for i in range(len(self.workers)):
                self.start_worker(i, wait=False)
            for i in range(len(self.workers)):
                self.wait_for_worker(i)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master; every process of the cluster has exited
        when it returns, also when stopping one of them failed (the first error is raised at the end)."""
        errors: list[Exception] = []
        for daemon in [*self.workers, self.master]:
            if daemon.proc is None:
                continue
            try:
                end_session(daemon.proc)
            except Exception as exc:  # stop the others all the same
                errors.append(exc)
        if errors:
            raise ReplmonError(f"stopping the standalone cluster in {self.base_dir}: {errors[0]}") from errors[0]

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:PORT``, for ``SparkSession.builder.master``."""
        if self._master_url is None:
            raise ReplmonError("the standalone cluster is not started")
        return self._master_url

    @property
    def web_ui_url(self) -> str:
        """The master's web UI on loopback; ``/json`` there is the state the cluster waits on."""
        if self._web_ui_port is None:
            raise ReplmonError("the standalone cluster is not started")
        return f"http://127.0.0.1:{self._web_ui_port}"

    # ------------------------------------------------------------------ processes
    def _env(self) -> dict[str, str]:
        """The JVMs' environment: the caller's without its SPARK_* settings (a user's SPARK_CONF_DIR or
        SPARK_WORKER_* would change the cluster), loopback only, small and lean daemon JVMs."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
        env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
                   SPARK_DAEMON_JAVA_OPTS=LEAN_JVM_OPTIONS, SPARK_LAUNCHER_OPTS=LEAN_JVM_OPTIONS)
        return env

    def _spawn(self, daemon: _Daemon, cmd: list[str], env: dict[str, str]) -> None:
        daemon.dir.mkdir(parents=True, exist_ok=True)
        with daemon.log.open("ab") as log:
            daemon.log_offset = log.tell()
            daemon.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=daemon.dir, env=env,
                start_new_session=True, preexec_fn=die_with_parent if self.die_with_parent else None,
            )

    def _wait_for_log(self, daemon: _Daemon, pattern: str, what: str) -> re.Match[str]:
        """Until the current run's log matches ``pattern``; fails at once, with the log's errors, when the
        process exits first, and with the log's tail at the deadline."""
        def probe() -> tuple[re.Match[str] | None, str] | None:
            if found := re.search(pattern, daemon.log_text()):
                return found, ""
            if daemon.proc is None or daemon.proc.poll() is not None:
                return None, f"exited ({daemon.proc.returncode if daemon.proc else 'not started'})"
            return None

        try:
            found, exited = wait_until(probe, self.timeout_s, what, interval_s=0.1)
        except AssertionError as exc:
            raise ReplmonError(f"{exc}; from {daemon.log}:\n{_log_tail(daemon.log)}") from exc
        if found is None:
            raise ReplmonError(f"{what}: the {daemon.name} {exited}; from {daemon.log}:\n{_log_excerpt(daemon.log)}")
        return found

    def _start_master(self) -> None:
        cmd = [str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
               "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"]
        self._spawn(self.master, cmd, self._env())
        self._wait_for_log(self.master, r"New state: ALIVE", "the Spark master to be elected leader")
        text = self.master.log_text()
        url = re.search(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", text)
        ui = re.search(r"Successfully started service 'MasterUI' on port (\d+)", text)
        if url is None or ui is None:
            raise ReplmonError(f"no master URL or web UI port in {self.master.log}:\n{_log_tail(self.master.log)}")
        self._master_url, self._web_ui_port = url.group(1), int(ui.group(1))

    def _worker_command(self, i: int) -> list[str]:
        """``unshare`` running :data:`PROLOGUE`, which ``exec``s the worker. Without root, the mount namespace
        comes with a user namespace where the caller is root (unprivileged user namespaces)."""
        worker = self.workers[i]
        unshare = ["unshare", "--mount", "--propagation", "private"]
        if os.geteuid() != 0:
            unshare += ["--user", "--map-root-user"]
        venv = str(self.venv) if self.venv.is_relative_to(self.root) else ""
        spark = [str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker",
                 "--host", "127.0.0.1", "--port", "0", "--webui-port", "0", "--cores", str(self.cores),
                 "--memory", self.memory, "--work-dir", f"{PRIVATE}/work", self.master_url]
        return [*unshare, "sh", "-c", PROLOGUE, "sparkcluster-prologue",
                str(worker.dir / "ns"), str(self.root), str(worker.dir / "work"), venv, *spark]

    def start_worker(self, i: int, wait: bool = True) -> None:
        """Start worker ``i`` (again, after :meth:`kill_worker`), with the same work dir; with ``wait``, return
        once the master counts it ALIVE."""
        worker = self.workers[i]
        if worker.running():
            raise ReplmonError(f"worker {i} is already running (pid {worker.proc.pid if worker.proc else '?'})")
        for sub in ("ns", "work"):
            (worker.dir / sub).mkdir(parents=True, exist_ok=True)
        env = self._env()
        env.update({WORKER_ENV: str(i), "SPARK_WORKER_DIR": f"{PRIVATE}/work",
                    "SPARK_LOCAL_DIRS": f"{PRIVATE}/local"})
        self._spawn(worker, self._worker_command(i), env)
        if wait:
            self.wait_for_worker(i)

    def wait_for_worker(self, i: int) -> None:
        """Until worker ``i``'s current run has registered with the master and the master shows it ALIVE."""
        worker = self.workers[i]
        what = f"worker {i} to register with the master"
        port = int(self._wait_for_log(worker, r"Starting Spark worker 127\.0\.0\.1:(\d+) ", what).group(1))
        self._wait_for_log(worker, r"Successfully registered with master", what)
        try:
            wait_until(lambda: self._worker_alive(port), self.timeout_s, f"the master to show {what}")
        except AssertionError as exc:
            raise ReplmonError(f"{exc}; from {worker.log}:\n{_log_tail(worker.log)}") from exc

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i``, its executors and their Python workers (the whole session), as a crash of its
        machine would; returns once they are gone and the master no longer counts the worker ALIVE."""
        worker = self.workers[i]
        if worker.proc is None or not worker.running():
            raise ReplmonError(f"worker {i} is not running")
        port_found = re.search(r"Starting Spark worker 127\.0\.0\.1:(\d+) ", worker.log_text())
        end_session(worker.proc, grace_s=0)
        if port_found:
            port = int(port_found.group(1))
            wait_until(lambda: not self._worker_alive(port), self.timeout_s, f"the master to see worker {i} gone")

    # ------------------------------------------------------------------ inspection
    def state(self) -> dict[str, Any]:
        """The master's state as its web UI's ``/json`` gives it (``aliveworkers``, ``workers``,
        ``activeapps``, ...). No proxy: it is on loopback."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"{self.web_ui_url}/json", timeout=5) as response:
            state: dict[str, Any] = json.load(response)
        return state

    def _worker_alive(self, port: int) -> bool:
        """The master counts the worker listening on ``port`` ALIVE. It lists a dead worker a while longer, and
        a restarted one may listen on the port a dead one had: any ALIVE entry of the port counts."""
        return any(w.get("port") == port and w.get("state") == "ALIVE" for w in self.state().get("workers", []))

    def alive_workers(self) -> int:
        return int(self.state().get("aliveworkers", 0))

    def worker_running(self, i: int) -> bool:
        return self.workers[i].running()

    def worker_log(self, i: int) -> Path:
        return self.workers[i].log

    def work_dir(self, i: int) -> Path:
        """Worker ``i``'s work dir as the host sees it (``{app}/{executor}/stdout``, ``stderr``)."""
        return self.workers[i].dir / "work"
