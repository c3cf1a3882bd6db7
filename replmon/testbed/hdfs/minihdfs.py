"""A real one-datanode HDFS on loopback (Hadoop's MiniDFSCluster in its own JVM), for tests that need HDFS's own
semantics (e.g. a rename onto an existing file fails) rather than the local file system's."""

from __future__ import annotations

import contextlib
import select
import subprocess
import time
from pathlib import Path
from types import TracebackType

from replmon.core.errors import ReplmonError
from replmon.core.paths import cache_dir
from replmon.core.processes import stop_processes
from replmon.testbed.localcluster.artifacts import java_executable, maven_libs

HADOOP_VERSION = "3.4.1"
"""The Hadoop of PySpark 4.0's bundled client (pyspark/jars/hadoop-client-api-3.4.1.jar): the server speaks the
client's own version."""

READY_PREFIX = "HDFS_READY "
SOURCE = Path(__file__).with_name("MiniHdfs.java")
"""Run with Java's source launcher (compiled in memory at each start): no build step, no class files to cache."""


def hdfs_libs(version: str = HADOOP_VERSION) -> Path:
    """The directory of jars that runs MiniHdfs.java on Hadoop ``version``, downloading them on first use."""
    return maven_libs(cache_dir() / f"hadoop-minicluster-{version}", "replmon.testbed.hdfs",
                      f"Hadoop minicluster {version}", f"hadoop-client-minicluster-{version}.jar",
                      f"-Dhadoop.version={version}")


class MiniHdfs:
    """One NameNode and one DataNode under ``base_dir``, every address on 127.0.0.1, permissions off. Its JVM
    logs to ``base_dir``/minihdfs.log and exits when this process dies (its stdin closes). ``port`` 0 picks a free
    NameNode port; :attr:`uri` names the one it got."""

    def __init__(self, base_dir: Path, port: int = 0, startup_timeout_s: float = 120.0) -> None:
        self.base_dir = base_dir
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.log_path = base_dir / "minihdfs.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._uri: str | None = None

    @property
    def uri(self) -> str:
        """``hdfs://127.0.0.1:<port>``, the file system's root."""
        if self._uri is None:
            raise ReplmonError("MiniHdfs is not running: start() it first")
        return self._uri

    def start(self) -> MiniHdfs:
        """Launch the JVM and return once the NameNode serves and the DataNode has registered; a JVM that dies or is
        not ready within ``startup_timeout_s`` is stopped and raises with the tail of its log."""
        if self._proc is not None:
            raise ReplmonError(f"MiniHdfs in {self.base_dir} is already started")
        libs, java = hdfs_libs(), java_executable()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        # the cluster's own dir: MiniDFSCluster empties it when it formats, the log beside it stays
        cmd = [java, "-Xmx512m", "-cp", str(libs / "*"), str(SOURCE), str(self.base_dir / "dfs"), str(self.port)]
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                          cwd=self.base_dir)
        try:
            self._uri = self._await_ready(self._proc)
        except BaseException:
            self.stop()
            raise
        return self

    def _await_ready(self, proc: subprocess.Popen[bytes]) -> str:
        """The URI of the READY line the JVM prints on stdout, waiting for it until the deadline."""
        assert proc.stdout is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([proc.stdout], [], [], left)[0]:
                continue
            raw = proc.stdout.readline()
            line = raw.decode(errors="replace").strip()
            if line.startswith(READY_PREFIX):
                return line.removeprefix(READY_PREFIX)
            if not raw:  # EOF: the JVM is exiting
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
                raise ReplmonError(f"MiniHdfs exited (status {proc.returncode}) before it was ready; "
                                   f"the end of {self.log_path}:\n{self.log_tail()}")
        raise ReplmonError(f"MiniHdfs was not ready within {self.startup_timeout_s:.0f}s; "
                           f"the end of {self.log_path}:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM the JVM (it shuts the cluster down itself) and wait for it; a no-op when not started."""
        proc, self._proc, self._uri = self._proc, None, None
        if proc is None:
            return
        stop_processes([proc], grace_s=30)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the JVM's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(no log: {exc})"

    def __enter__(self) -> MiniHdfs:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
