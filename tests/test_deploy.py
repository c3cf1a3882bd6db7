"""The deployments of docs/deploy.md, as far as this machine (no Docker engine, no Kubernetes, no YARN) allows.

- The image's entrypoint (deploy/entrypoint.sh), run with bash and the venv's pyspark as SPARK_HOME: the commands
  of its `driver` and `executor` modes are those of Spark's own image entrypoint for the same environment; the
  environment variables and executor options it relies on are those of Spark 4.0.0's jars; anything else runs
  `replmon` (for real). In the `spark` tier both modes run for real against a standalone master: the driver is
  spark-submit in client mode, the executor is Spark's KubernetesExecutorBackend, which registers with it and runs
  Python tasks that import replmon's code.
- The Dockerfile around it: tini, SPARK_HOME and the job's entry file at the paths of the python base image.
- deploy/kubernetes/sparkapplication.yaml: the SparkApplication against the Kubeflow Spark operator's CRD schema
  (tests/data/, vendored) with unknown fields refused as `kubectl --validate=strict` would, its pod templates
  (free-form in the CRD) against the core/v1 Container, Volume and PodSecurityContext schemas the CRD holds;
  the replmon configuration of its ConfigMap against replmon's; the wiring between the job, the configuration,
  the pod templates, RBAC and the metrics Service.
- docs/deploy.md: every `replmon ...` command parses, the spark-submit commands carry the packages and archives
  the job needs, the files and sections it names exist.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pyspark
import pytest
import yaml

import replmon
from replmon.cli import build_parser
from replmon.cli import submit as submit_module
from replmon.cli.package import submit_command
from replmon.core import locations
from replmon.core.config import ReplmonConfig, load_config
from replmon.core.processes import wait_until
from replmon.testbed.harness import pipeline_settings, write_config
from replmon.testbed.localcluster import LocalCluster
from replmon.testbed.localcluster.cluster import free_port
from streaming.code_archive import ARCHIVE_ALIAS
from streaming.session import (
    ABORTABLE_CHECKPOINT_MANAGER,
    CHECKPOINT_MANAGER,
    HADOOP_CLOUD,
    KAFKA_CONNECTOR,
    checkpoint_manager_conf,
    state_parallelism,
)

ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"
DOCKERFILE = ROOT / "Dockerfile"
MANIFEST = ROOT / "deploy" / "kubernetes" / "sparkapplication.yaml"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
CRD = ROOT / "tests" / "data" / "sparkoperator.k8s.io_sparkapplications.yaml"
COMPOSE = ROOT / "docker-compose.yml"

SPARK_HOME = Path(pyspark.__file__).resolve().parent
"""The pip-installed pyspark package: a Spark distribution (bin/, jars/), the image's SPARK_HOME."""
VENV_BIN = Path(sys.executable).parent
"""The venv's bin: replmon, python3 with replmon's dependencies (the image's /usr/local/bin)."""
IMAGE_ENTRYPOINT = ["/usr/bin/tini", "-s", "--", "/opt/replmon/entrypoint.sh"]
DRIVER_CONTAINER = "spark-kubernetes-driver"
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
"""Spark's container names in its driver and executor pods (a pod template's first container becomes them)."""
OPERATOR_APP_LABEL = "sparkoperator.k8s.io/app-name"
"""The label the operator puts on the driver pod, naming the SparkApplication (kubeflow/spark-operator,
pkg/common/spark.go: LabelSparkAppName); Spark's own is spark-role=driver."""

SPARK_SET_ENV = ("SPARK_DRIVER_URL", "SPARK_EXECUTOR_ID", "SPARK_EXECUTOR_CORES", "SPARK_EXECUTOR_MEMORY",
                 "SPARK_APPLICATION_ID", "SPARK_EXECUTOR_POD_IP", "SPARK_RESOURCE_PROFILE_ID",
                 "SPARK_EXECUTOR_POD_NAME", "SPARK_DRIVER_BIND_ADDRESS", "SPARK_DRIVER_POD_IP", "SPARK_JAVA_OPT_",
                 "SPARK_CLASSPATH", "SPARK_CONF_DIR", "HADOOP_CONF_DIR", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
"""The environment Spark on Kubernetes gives its pods that the entrypoint reads (Spark's Constants)."""
EXECUTOR_OPTIONS = ("--driver-url", "--executor-id", "--cores", "--app-id", "--hostname", "--resourceProfileId",
                    "--podName")


# --- the entrypoint -----------------------------------------------------------------------------------------------


def entrypoint_env(extra: dict[str, str] | None = None, *, spark_home: bool = True) -> dict[str, str]:
    """This process's environment without Spark's, Hadoop's and PySpark's variables, the venv's bin first on PATH
    (as /usr/local/bin in the image), SPARK_HOME the venv's pyspark, a fixed JAVA_HOME unless ``extra`` says."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPARK_", "PYSPARK_", "HADOOP_", "JAVA_HOME", "REPLMON_ENTRYPOINT"))}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env["JAVA_HOME"] = "/opt/jdk-17"
    if spark_home:
        env["SPARK_HOME"] = str(SPARK_HOME)
    env.update(extra or {})
    return env


def dry_run(args: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    """The command the entrypoint would exec for ``args``."""
    out = subprocess.run(["bash", str(ENTRYPOINT), *args], env={**env, "REPLMON_ENTRYPOINT_DRY_RUN": "1"}, cwd=cwd,
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.endswith(b"\0"), out.stdout
    return [word.decode() for word in out.stdout.split(b"\0")[:-1]]


def upstream_executor_command(env: dict[str, str], cwd: Path) -> list[str]:
    """The executor command of Spark's entrypoint.sh (apache/spark v4.0.0,
    resource-managers/kubernetes/docker/src/main/dockerfiles/spark/entrypoint.sh) for ``env`` and working directory
    ``cwd``, step by step as the script builds it."""
    classpath = f"{env.get('SPARK_CLASSPATH', '')}:{env['SPARK_HOME']}/jars/*"
    opts = sorted(((k, v) for k, v in env.items() if k.startswith("SPARK_JAVA_OPT_")),
                  key=lambda kv: int(kv[0].removeprefix("SPARK_JAVA_OPT_")))  # sort -t_ -k4 -n
    if env.get("SPARK_EXTRA_CLASSPATH"):
        classpath = f"{classpath}:{env['SPARK_EXTRA_CLASSPATH']}"
    if "HADOOP_CONF_DIR" in env:
        classpath = f"{env['HADOOP_CONF_DIR']}:{classpath}"
    if "SPARK_CONF_DIR" in env:
        classpath = f"{env['SPARK_CONF_DIR']}:{classpath}"
    else:
        classpath = f"{env['SPARK_HOME']}/conf:{classpath}"
    classpath = f"{classpath}:{cwd}"  # SPARK-43540
    return [f"{env['JAVA_HOME']}/bin/java", *(v for _k, v in opts),
            f"-Xms{env['SPARK_EXECUTOR_MEMORY']}", f"-Xmx{env['SPARK_EXECUTOR_MEMORY']}",
            "-cp", f"{classpath}:{env.get('SPARK_DIST_CLASSPATH', '')}",
            "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
            "--driver-url", env["SPARK_DRIVER_URL"], "--executor-id", env["SPARK_EXECUTOR_ID"],
            "--cores", env["SPARK_EXECUTOR_CORES"], "--app-id", env["SPARK_APPLICATION_ID"],
            "--hostname", env["SPARK_EXECUTOR_POD_IP"], "--resourceProfileId", env["SPARK_RESOURCE_PROFILE_ID"],
            "--podName", env["SPARK_EXECUTOR_POD_NAME"]]


EXECUTOR_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@replmon-stream-driver-svc.replmon.svc:7078",
    "SPARK_EXECUTOR_ID": "5", "SPARK_EXECUTOR_CORES": "2", "SPARK_EXECUTOR_MEMORY": "2048m",
    "SPARK_APPLICATION_ID": "spark-9f1e2d3c4b5a", "SPARK_EXECUTOR_POD_IP": "10.244.1.17",
    "SPARK_RESOURCE_PROFILE_ID": "0", "SPARK_EXECUTOR_POD_NAME": "replmon-stream-exec-5",
}
"""What Spark on Kubernetes sets on an executor pod (besides the Java options)."""


@pytest.mark.parametrize("extra", [
    {},
    {"SPARK_JAVA_OPT_0": "-Dspark.driver.port=7078", "SPARK_JAVA_OPT_1": "-Dspark.app.name=replmon stream",
     "SPARK_JAVA_OPT_10": "-Djava.net.preferIPv6Addresses=false",
     "SPARK_JAVA_OPT_2": "-XX:+IgnoreUnrecognizedVMOptions",
     "SPARK_CLASSPATH": "/opt/first/*", "SPARK_EXTRA_CLASSPATH": "/opt/extra/*",
     "SPARK_DIST_CLASSPATH": "/opt/hadoop/*", "HADOOP_CONF_DIR": "/etc/hadoop/conf",
     "SPARK_CONF_DIR": "/opt/spark/conf"},
], ids=["plain", "options-and-classpaths"])
def test_executor_mode_runs_the_command_of_sparks_entrypoint(extra: dict[str, str], tmp_path: Path) -> None:
    env = entrypoint_env({**EXECUTOR_ENV, **extra})
    command = dry_run(["executor"], env, tmp_path)
    assert command == upstream_executor_command(env, tmp_path)
    if extra:  # numeric order of SPARK_JAVA_OPT_<n>, and an option with a space stays one argument
        assert command[1:5] == ["-Dspark.driver.port=7078", "-Dspark.app.name=replmon stream",
                                "-XX:+IgnoreUnrecognizedVMOptions", "-Djava.net.preferIPv6Addresses=false"]


def test_executor_mode_finds_java_home_like_sparks_entrypoint(tmp_path: Path) -> None:
    java = require_java()
    env = entrypoint_env(EXECUTOR_ENV)
    del env["JAVA_HOME"]
    settings = subprocess.run([java, "-XshowSettings:properties", "-version"], capture_output=True, text=True,
                              timeout=60).stderr
    java_home = next(line.split("=", 1)[1].strip() for line in settings.splitlines() if "java.home" in line)
    assert dry_run(["executor"], env, tmp_path)[0] == f"{java_home}/bin/java"


def test_driver_mode_is_spark_submit_in_client_mode_on_the_pods_address(tmp_path: Path) -> None:
    # what Spark passes to the driver container (KubernetesClientApplication, PythonRunner for a Python app)
    args = ["--properties-file", "/opt/spark/conf/spark.properties", "--class",
            "org.apache.spark.deploy.PythonRunner",
            "local:///usr/local/lib/python3.11/site-packages/replmon/cli/submit.py",
            "--config", "/etc/replmon/replmon.yaml"]
    env = entrypoint_env({"SPARK_DRIVER_BIND_ADDRESS": "10.244.0.9"})
    assert dry_run(["driver", *args], env, tmp_path) == [
        f"{SPARK_HOME}/bin/spark-submit", "--conf", "spark.driver.bindAddress=10.244.0.9",
        "--conf", "spark.executorEnv.SPARK_DRIVER_POD_IP=10.244.0.9", "--deploy-mode", "client", *args]


def test_without_spark_home_the_entrypoint_takes_pythons_pyspark(tmp_path: Path) -> None:
    env = entrypoint_env({"SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1"}, spark_home=False)
    assert dry_run(["driver", "app.py"], env, tmp_path)[0] == f"{SPARK_HOME}/bin/spark-submit"


def test_anything_else_is_a_replmon_command(tmp_path: Path) -> None:
    env = entrypoint_env()
    assert dry_run([], env, tmp_path) == ["replmon"]
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    commands = [s["command"] for s in services.values() if s.get("build")]
    assert commands, "docker-compose.yml runs no service of the image"
    for command in commands:  # docker-compose.yml's services keep running replmon
        assert dry_run(command, env, tmp_path) == ["replmon", *command]


@pytest.mark.parametrize("args, usage", [(["--help"], "usage: replmon "),
                                         (["stream", "--help"], "usage: replmon stream")])
def test_anything_else_runs_replmon(args: list[str], usage: str, tmp_path: Path) -> None:
    out = subprocess.run(["bash", str(ENTRYPOINT), *args], env=entrypoint_env(), cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(usage), out.stdout[:200]


def test_replmons_exit_status_is_the_containers(tmp_path: Path) -> None:
    out = subprocess.run(["bash", str(ENTRYPOINT), "agent", "--config", "/etc/replmon/replmon.yaml"],
                         env=entrypoint_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--log-dir" in out.stderr, out.stderr


def test_the_entrypoint_reads_what_spark_4_sets_and_passes_what_its_executor_takes() -> None:
    """The names come from Spark 4.0.0's own jars (pyspark's): the variables Spark on Kubernetes sets on its pods
    (deploy.k8s.Constants) and the options KubernetesExecutorBackend parses (its usage text)."""
    assert pyspark.__version__ == "4.0.0"
    script = ENTRYPOINT.read_text()
    jar = next((SPARK_HOME / "jars").glob("spark-kubernetes_2.13-*.jar"))
    with zipfile.ZipFile(jar) as z:
        constants = z.read("org/apache/spark/deploy/k8s/Constants$.class")
        backend = z.read("org/apache/spark/scheduler/cluster/k8s/KubernetesExecutorBackend$.class")
    for name in SPARK_SET_ENV:
        assert name.encode() in constants, f"Spark 4.0.0 sets no {name}"
        assert name in script, f"the entrypoint ignores {name}"
    assert b"spark-role" in constants  # the driver pod's label the metrics Service selects
    for option in EXECUTOR_OPTIONS:
        assert f"--{option.removeprefix('--')} <".encode() in backend, f"KubernetesExecutorBackend takes no {option}"
        assert f"      {option} " in script, f"the entrypoint does not pass {option}"


def test_the_entrypoint_is_an_executable_bash_script() -> None:
    assert os.access(ENTRYPOINT, os.X_OK), "deploy/entrypoint.sh must be executable (git mode 100755)"
    assert ENTRYPOINT.read_text().startswith("#!/bin/bash\n")
    out = subprocess.run(["bash", "-n", str(ENTRYPOINT)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


# --- the entrypoint, for real ---------------------------------------------------------------------------------------


def spawn(cmd: list[str], log: Path, env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)


def end(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``proc`` and every process of its session (a JVM and its Python workers)."""
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 15.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # what the session leader left behind


def require_java() -> str:
    """The java on PATH, as the image has it (OpenJDK 17); the project's setup installs it, so its absence is a
    broken machine, not a reason to skip."""
    java = shutil.which("java")
    assert java is not None, "no java on PATH: scripts/setup installs OpenJDK 17, as the image has it"
    return java


def wait_for(predicate: Any, timeout_s: float, what: str, *logs: Path) -> None:
    """:func:`replmon.core.processes.wait_until`, failing with the tails of ``logs``."""
    try:
        wait_until(predicate, timeout_s, what)
    except AssertionError as exc:
        tails = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in logs
                          if log.exists())
        raise AssertionError(f"{exc}\n{tails}") from None


PROBE = '''
import json, os, sys
from pathlib import Path
from pyspark.sql import SparkSession
from replmon.core.processes import wait_until

out = Path(sys.argv[1])
spark = SparkSession.builder.appName("replmon-entrypoint-test").getOrCreate()
sc = spark.sparkContext
conf = sc.getConf()
(out / "driver.json").write_text(json.dumps({
    "driver_url": f"spark://CoarseGrainedScheduler@{conf.get('spark.driver.host')}:{conf.get('spark.driver.port')}",
    "app_id": sc.applicationId, "bind_address": conf.get("spark.driver.bindAddress"),
    "deploy_mode": conf.get("spark.submit.deployMode"),
    "java_options": conf.get("spark.executor.extraJavaOptions", "")}))

def executors():
    ids = sc._jsc.sc().getExecutorIds()
    return sorted(str(ids.apply(i)) for i in range(ids.size()))

try:
    wait_until(executors, 120, "an executor")
except AssertionError:
    pass  # result.json says that none registered

def probe(_):
    import os, sys
    import replmon, streaming.session
    yield {"pod": os.environ.get("SPARK_EXECUTOR_POD_NAME"), "python": sys.executable,
           "replmon": os.path.dirname(replmon.__file__), "streaming": streaming.session.__name__}

rows = sc.parallelize(range(4), 4).mapPartitions(probe).collect() if executors() else []
(out / "result.json").write_text(json.dumps({"executors": executors(), "rows": rows}))
spark.stop()
'''


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_driver_and_executor_modes_run_a_python_job(tmp_path: Path) -> None:
    """A driver started by the entrypoint's `driver` mode (spark-submit, client mode, on a standalone master that
    has no worker) and an executor started by its `executor` mode with the environment Spark on Kubernetes gives
    an executor pod: the executor registers with the driver and runs its Python tasks with the image's
    PYSPARK_PYTHON (python3 on PATH), which imports replmon's code."""
    require_java()
    env = entrypoint_env({"PYSPARK_PYTHON": "python3"})
    del env["JAVA_HOME"]  # as in the image: the entrypoint finds it
    for name in ("master", "driver", "executor"):
        (tmp_path / name).mkdir()
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    logs = {name: tmp_path / f"{name}.log" for name in ("master", "driver", "executor")}
    try:
        procs.append(spawn([str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
                            "--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"],
                           logs["master"], {**env, "SPARK_DAEMON_MEMORY": "256m"}, tmp_path / "master"))
        wait_for(lambda: "I have been elected leader" in logs["master"].read_text(errors="replace"), 90,
                 "standalone master", logs["master"])

        (tmp_path / "probe.py").write_text(PROBE)
        driver = spawn(["bash", str(ENTRYPOINT), "driver", "--master", master_url,
                        "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false",
                        "--conf", "spark.executor.cores=1", "--conf", "spark.executor.memory=512m",
                        str(tmp_path / "probe.py"), str(tmp_path)],
                       logs["driver"], {**env, "SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1"}, tmp_path / "driver")
        procs.append(driver)
        wait_for(lambda: (tmp_path / "driver.json").exists() or driver.poll() is not None, 120, "driver",
                 logs["driver"])
        assert (tmp_path / "driver.json").exists(), logs["driver"].read_text(errors="replace")[-3000:]
        started = json.loads((tmp_path / "driver.json").read_text())
        assert started["bind_address"] == "127.0.0.1" and started["deploy_mode"] == "client"

        # Spark on Kubernetes hands the executor its JVM options as SPARK_JAVA_OPT_<n> (Java 17's module opens)
        options = {f"SPARK_JAVA_OPT_{i}": o for i, o in enumerate(shlex.split(started["java_options"]))}
        executor_env = {**env, **options, **EXECUTOR_ENV, "SPARK_DRIVER_URL": started["driver_url"],
                        "SPARK_EXECUTOR_ID": "1", "SPARK_EXECUTOR_CORES": "1", "SPARK_EXECUTOR_MEMORY": "512m",
                        "SPARK_APPLICATION_ID": started["app_id"], "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
                        "SPARK_EXECUTOR_POD_NAME": "replmon-stream-exec-1"}
        procs.append(spawn(["bash", str(ENTRYPOINT), "executor"], logs["executor"], executor_env,
                           tmp_path / "executor"))
        with contextlib.suppress(subprocess.TimeoutExpired):
            driver.wait(240)
        assert driver.returncode == 0, "\n".join(f"--- {n}\n{p.read_text(errors='replace')[-3000:]}"
                                                 for n, p in logs.items())
        result = json.loads((tmp_path / "result.json").read_text())
        assert result["executors"] == ["1"]
        assert len(result["rows"]) == 4
        for row in result["rows"]:
            assert row["pod"] == "replmon-stream-exec-1" and row["streaming"] == "streaming.session"
            assert Path(row["python"]).parent == VENV_BIN  # python3, found on the executor's PATH
            assert Path(row["replmon"]) == Path(replmon.__file__).parent
        assert "KubernetesExecutorBackend" in logs["executor"].read_text(errors="replace")
    finally:
        for proc in reversed(procs):
            end(proc)


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_driver_mode_runs_the_jobs_entry_file(tmp_path: Path) -> None:
    """spark-submit from the entrypoint's `driver` mode runs replmon/cli/submit.py (the SparkApplication's
    mainApplicationFile) with the image's PYSPARK_PYTHON: `replmon stream` and its arguments."""
    require_java()
    env = entrypoint_env({"SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1", "PYSPARK_PYTHON": "python3"})
    del env["JAVA_HOME"]
    out = subprocess.run(["bash", str(ENTRYPOINT), "driver", "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                          submit_module.__file__, "--help"], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=150)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "usage: replmon stream" in out.stdout


@pytest.mark.cluster
@pytest.mark.spark
@pytest.mark.timeout(240)
def test_driver_mode_stops_the_job_on_a_sigterm_to_its_jvm(healthy_cluster: LocalCluster, tmp_path: Path) -> None:
    """The SIGTERM a Kubernetes pod's deletion sends the driver's container reaches spark-submit's JVM alone (tini
    passes it to its child, the JVM the entrypoint execs; the job's Python is the JVM's child): the JVM's shutdown
    waits until the job has stopped, which says so, then ends with 143, and the job's Python ends too. The job
    here waits for its samples topic, as before the first collector publishes; a SIGTERM in mid-stream:
    tests/test_spark_deploy.py."""
    require_java()
    settings = pipeline_settings(healthy_cluster, healthy_cluster, tmp_path, include=["none"],
                                 metrics_port=free_port(), collector_metrics_port=free_port(),
                                 topic_names=f"sigterm-{tmp_path.name}")
    config = write_config(tmp_path / "replmon.yaml", settings)
    env = entrypoint_env({"SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1", "PYSPARK_PYTHON": "python3"})
    del env["JAVA_HOME"]
    log = tmp_path / "driver.log"
    driver = spawn(["bash", str(ENTRYPOINT), "driver", "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                    submit_module.__file__, "--config", str(config)], log, env, tmp_path)
    try:
        wait_for(lambda: "waiting for topic" in log.read_text(errors="replace") or driver.poll() is not None, 150,
                 "the job waiting for its samples topic", log)
        assert Path(f"/proc/{driver.pid}/exe").resolve().name == "java", log.read_text(errors="replace")[-3000:]
        driver.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            driver.wait(60)
        said = log.read_text(errors="replace")
        assert driver.returncode == 143 and "replmon stream: stopping" in said, said[-3000:]
        assert "Traceback" not in said and "ShutdownHook '" not in said, said[-3000:]  # Hadoop's: a hook failed

        def session_gone() -> bool:  # the job's Python, the JVM's child, in the entrypoint's session
            try:
                os.killpg(driver.pid, 0)
            except ProcessLookupError:
                return True
            return False

        wait_for(session_gone, 60, "the job's Python to end after its JVM", log)
    finally:
        end(driver)


# --- the Dockerfile -------------------------------------------------------------------------------------------------


def dockerfile_lines() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for line in dockerfile_lines():
        if line.startswith("ENV "):
            env.update(dict(word.split("=", 1) for word in shlex.split(line.removeprefix("ENV "))))
    return env


def image_site_packages() -> str:
    """The python base image's site-packages (where pip installs replmon and pyspark)."""
    base = next(line for line in dockerfile_lines() if line.startswith("FROM "))
    match = re.fullmatch(r"FROM python:(\d+\.\d+)-slim(-\w+)?", base)
    assert match, base
    return f"/usr/local/lib/python{match.group(1)}/site-packages"


def test_the_image_runs_the_entrypoint_under_tini_with_sparks_settings() -> None:
    lines = dockerfile_lines()
    entry = [line for line in lines if line.startswith("ENTRYPOINT ")]
    assert len(entry) == 1 and json.loads(entry[0].removeprefix("ENTRYPOINT ")) == IMAGE_ENTRYPOINT
    assert f"COPY deploy/entrypoint.sh {IMAGE_ENTRYPOINT[-1]}" in lines
    install = next(line for line in lines if "apt-get install" in line)
    assert {"tini", "openjdk-17-jre-headless", "procps"} <= set(install.split())
    env = dockerfile_env()
    assert env["SPARK_HOME"] == f"{image_site_packages()}/pyspark"
    assert env["PYSPARK_PYTHON"] == "python3"
    assert any("useradd --uid 1000 " in line for line in lines)
    assert [line for line in lines if line.startswith("USER ")] == ["USER 1000"]
    # replmon and pyspark side by side in site-packages, as in the image
    assert SPARK_HOME.name == "pyspark" and (SPARK_HOME / "bin" / "spark-submit").is_file()
    assert Path(submit_module.__file__).resolve().relative_to(Path(replmon.__file__).resolve().parent.parent) \
        == Path("replmon/cli/submit.py")


# --- the Kubernetes manifest ----------------------------------------------------------------------------------------


def manifest() -> dict[str, dict[str, Any]]:
    """The manifest's objects by kind (one of each)."""
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    kinds = [d["kind"] for d in docs]
    assert len(kinds) == len(set(kinds)), kinds
    return {d["kind"]: d for d in docs}


def app_config(tmp_path: Path) -> ReplmonConfig:
    """The replmon configuration of the ConfigMap, loaded as the driver loads it (no environment overrides)."""
    data = manifest()["ConfigMap"]["data"]
    assert list(data) == ["replmon.yaml"]
    path = tmp_path / "replmon.yaml"
    path.write_text(data["replmon.yaml"])
    return load_config(path, env={})


def crd_text() -> str:
    return CRD.read_text()


@functools.cache
def crd_schema() -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(crd_text(), Loader=loader)  # a safe loader, libyaml's where there is one
    assert crd["spec"]["group"] == "sparkoperator.k8s.io" and crd["spec"]["names"]["kind"] == "SparkApplication"
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def unknown_fields(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields the structural schema does not declare (the API server prunes them; strict validation refuses)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        found = []
        for key, item in value.items():
            if properties is not None and key in properties:
                found += unknown_fields(item, properties[key], f"{path}.{key}")
            elif isinstance(additional, dict):
                found += unknown_fields(item, additional, f"{path}.{key}")
            elif properties is not None or additional is False:
                found.append(f"{path}.{key}")
        return found
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [f for i, item in enumerate(value) for f in unknown_fields(item, schema["items"], f"{path}[{i}]")]
    return []


def template_schema(role: str) -> dict[str, Any]:
    """A schema for the pod templates of the manifest. The CRD leaves ``template`` free-form (Spark reads it), but
    holds the core/v1 schemas of its parts elsewhere: Container (``initContainers``), Volume (``spec.volumes``),
    PodSecurityContext (``podSecurityContext``). A template may use these parts only."""
    spec = crd_schema()["properties"]["spec"]["properties"]
    pod = {"containers": {"type": "array", "items": spec[role]["properties"]["initContainers"]["items"]},
           "volumes": spec["volumes"], "securityContext": spec[role]["properties"]["podSecurityContext"]}
    return {"type": "object", "properties": {"spec": {"type": "object", "properties": pod, "required": ["containers"]}}}


def schema_errors(app: dict[str, Any]) -> list[str]:
    """What the API server (with strict field validation) would refuse in the SparkApplication ``app``, and what
    Spark would find wrong in its pod templates."""
    try:
        import jsonschema
    except ImportError:
        pytest.fail("validating the SparkApplication needs the jsonschema package (pyproject's test extras)")
    checks = [(app, crd_schema(), "")]
    for role in ("driver", "executor"):
        template = app.get("spec", {}).get(role, {}).get("template")
        if template is not None:
            checks.append((template, template_schema(role), f"spec.{role}.template."))
    errors = []
    for value, schema, prefix in checks:
        validator = jsonschema.Draft4Validator(schema)
        errors += [f"{prefix}{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
                   for e in validator.iter_errors(value)]
        errors += [f"{prefix}{field.lstrip('.')}: an unknown field" for field in unknown_fields(value, schema)]
    return errors


def test_the_vendored_crd_is_the_operators_file_unchanged() -> None:
    text = crd_text()
    header = text[:text.index("\n---\n") + 1]
    assert all(line.startswith("#") for line in header.splitlines())
    assert "Apache License, Version 2.0" in header and "kubeflow/spark-operator" in header
    digest = re.search(r"sha256 is ([0-9a-f]{64})", header)
    assert digest, header
    assert hashlib.sha256(text[len(header):].encode()).hexdigest() == digest.group(1)


def test_the_sparkapplication_fits_the_operators_crd() -> None:
    app = manifest()["SparkApplication"]
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    assert schema_errors(app) == []


@pytest.mark.parametrize("change, error", [
    (lambda spec: spec["driver"].update(coress=1), "spec.driver.coress: an unknown field"),
    (lambda spec: spec["driver"]["template"]["spec"]["containers"][0].update(volumeMount=[]),
     "spec.driver.template.spec.containers[0].volumeMount: an unknown field"),
    (lambda spec: spec["executor"]["template"]["spec"].update(volumes=[{"name": "x", "configMap": {"nam": "y"}}]),
     "spec.executor.template.spec.volumes[0].configMap.nam: an unknown field"),
    (lambda spec: spec["driver"]["template"]["spec"]["containers"][0]["ports"][0].update(containerPort="9464"),
     "spec.driver.template.spec.containers.0.ports.0.containerPort: '9464' is not of type 'integer'"),
    (lambda spec: spec.update(mode="detached"), "spec.mode: 'detached' is not one of"),
    (lambda spec: spec.pop("sparkVersion"), "'sparkVersion' is a required property"),
    (lambda spec: spec["executor"].update(instances="2"), "spec.executor.instances: '2' is not of type"),
], ids=["unknown-field", "unknown-field-in-template", "unknown-volume-field", "template-type", "enum", "required",
        "type"])
def test_the_schema_check_catches_mistakes(change: Any, error: str) -> None:
    app = manifest()["SparkApplication"]
    change(app["spec"])
    assert any(error in e for e in schema_errors(app)), schema_errors(app)


def test_the_sparkapplication_runs_the_job_from_the_image(tmp_path: Path) -> None:
    objects = manifest()
    app, spec = objects["SparkApplication"], objects["SparkApplication"]["spec"]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert spec["type"] == "Python" and spec["pythonVersion"] == "3" and spec["mode"] == "cluster"
    assert spec["image"] == f"replmon:{version}"
    assert spec["sparkVersion"] == pyspark.__version__
    assert spec["mainApplicationFile"] == f"local://{image_site_packages()}/replmon/cli/submit.py"
    assert f"{image_site_packages()}/pyspark" == dockerfile_env()["SPARK_HOME"]
    args = build_parser().parse_args(["stream", *spec["arguments"]])  # what submit.py hands the command line
    assert args.command == "stream" and args.config == Path("/etc/replmon/replmon.yaml")

    config = app_config(tmp_path)
    packages = set(spec["deps"]["packages"])
    assert KAFKA_CONNECTOR in packages
    object_store = checkpoint_manager_conf(config.stream.checkpoint_dir).get(CHECKPOINT_MANAGER)
    assert (HADOOP_CLOUD in packages) == (object_store == ABORTABLE_CHECKPOINT_MANAGER)
    assert packages <= {KAFKA_CONNECTOR, HADOOP_CLOUD}

    policy = spec["restartPolicy"]
    assert policy["type"] == "OnFailure" and policy["onFailureRetries"] > 0 and policy["onSubmissionFailureRetries"] > 0
    for role in ("driver", "executor"):
        assert spec[role]["cores"] >= 1 and re.fullmatch(r"\d+[mg]", spec[role]["memory"]), spec[role]
    # the state tasks of a new checkpoint: the operator's spark.executor.instances x spark.executor.cores
    submitted = {"spark.master": "k8s://https://kubernetes.default.svc",
                 "spark.executor.instances": str(spec["executor"]["instances"]),
                 "spark.executor.cores": str(spec["executor"]["cores"])}
    assert state_parallelism(config.stream, submitted) == spec["executor"]["instances"] * spec["executor"]["cores"]
    assert {o["metadata"]["namespace"] for o in objects.values()} == {app["metadata"]["namespace"]}


def test_the_configmap_is_a_replmon_configuration_for_the_pod(tmp_path: Path) -> None:
    objects = manifest()
    config = app_config(tmp_path)
    stream = config.stream
    for location in (stream.checkpoint_dir, stream.history_dir):
        assert locations.scheme(location) in ("s3a", "hdfs"), location  # reached by the driver and every executor
    assert stream.metrics_host == "0.0.0.0"  # the metrics Service reaches the pod's address
    assert stream.code_archive == "none"  # the image has replmon installed
    assert stream.driver_host is None and stream.driver_bind_address is None  # Spark on Kubernetes sets both
    assert config.samples_bootstrap()

    # the driver's pod template mounts the ConfigMap where --config points
    spec = objects["SparkApplication"]["spec"]
    template = spec["driver"]["template"]["spec"]
    container = template["containers"][0]
    assert container["name"] == DRIVER_CONTAINER
    config_path = Path(spec["arguments"][spec["arguments"].index("--config") + 1])
    volume = next(v for v in template["volumes"] if v.get("configMap", {}).get("name") ==
                  objects["ConfigMap"]["metadata"]["name"])
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert Path(mount["mountPath"]) == config_path.parent and config_path.name in objects["ConfigMap"]["data"]
    assert spec["executor"]["template"]["spec"]["containers"][0]["name"] == EXECUTOR_CONTAINER
    for role in ("driver", "executor"):  # the image's user
        assert spec[role]["template"]["spec"]["securityContext"]["runAsUser"] == 1000


def test_the_driver_runs_as_a_service_account_allowed_to_manage_its_executors() -> None:
    objects = manifest()
    account = objects["SparkApplication"]["spec"]["driver"]["serviceAccount"]
    assert objects["ServiceAccount"]["metadata"]["name"] == account
    binding = objects["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": objects["Role"]["metadata"]["name"]}
    assert {"kind": "ServiceAccount", "name": account,
            "namespace": objects["ServiceAccount"]["metadata"]["namespace"]} in binding["subjects"]
    granted = {(r, v) for rule in objects["Role"]["rules"] if rule["apiGroups"] == [""]
               for r in rule["resources"] for v in rule["verbs"]}
    for resource in ("pods", "services", "configmaps"):
        for verb in ("create", "get", "list", "watch", "delete"):
            assert (resource, verb) in granted, (resource, verb)


def test_the_metrics_service_selects_the_driver_pod_on_the_metrics_port(tmp_path: Path) -> None:
    objects = manifest()
    port = app_config(tmp_path).stream.metrics_port
    service = objects["Service"]
    app_name = objects["SparkApplication"]["metadata"]["name"]
    assert service["spec"]["selector"] == {"spark-role": "driver", OPERATOR_APP_LABEL: app_name}
    (service_port,) = service["spec"]["ports"]
    assert service_port["port"] == port
    container = objects["SparkApplication"]["spec"]["driver"]["template"]["spec"]["containers"][0]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named[service_port["targetPort"]] == port
    annotations = service["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == str(port)


# --- docs/deploy.md -------------------------------------------------------------------------------------------------


def doc_text() -> str:
    return DEPLOY_DOC.read_text()


def code_blocks(lang: str | None = None) -> list[str]:
    return [body for found, body in re.findall(r"^```(\w*)\n(.*?)^```", doc_text(), re.M | re.S)
            if lang is None or found == lang]


def shell_commands() -> list[list[str]]:
    """The commands of the doc's shell blocks (continuations joined, comments and leading VAR=value dropped)."""
    commands = []
    for block in code_blocks("sh"):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            words = shlex.split(re.sub(r"(^|\s)#.*$", "", line))  # bash: a comment starts a word
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words = words[1:]
            if words:
                commands.append(words)
    return commands


def replmon_commands() -> list[list[str]]:
    """Every `replmon ...` of the doc: in its shell blocks and in inline code."""
    inline = [shlex.split(span) for span in re.findall(r"`(replmon [^`]+)`", doc_text().replace("\n", " "))]
    return [c[1:] for c in [*(c for c in shell_commands() if c[0] == "replmon"), *inline]]


def test_every_replmon_command_in_the_doc_parses() -> None:
    commands = replmon_commands()
    assert {c[0] for c in commands} >= {"stream", "package"}, commands
    parser = build_parser()
    for command in commands:
        args = parser.parse_args(command)  # SystemExit (a failure) on an invalid invocation
        assert callable(args.handler)


def test_the_doc_s_replmon_configurations_load(tmp_path: Path) -> None:
    """Each YAML block of the doc that is a replmon configuration (not Prometheus's) loads as one."""
    blocks = [block for block in code_blocks("yaml") if "scrape_configs" not in yaml.safe_load(block)]
    assert blocks
    for block in blocks:
        path = tmp_path / "replmon.yaml"
        path.write_text(block)
        load_config(path, env={})  # a ReplmonError names what the doc got wrong


def spark_submits() -> list[list[str]]:
    return [c for c in shell_commands() if c[0] == "spark-submit"]


def test_the_docs_spark_submit_commands_ship_what_the_job_needs() -> None:
    commands = spark_submits()
    assert len(commands) == 2, commands  # `replmon package`'s, and YARN's
    for command in commands:
        options = dict(itertools.pairwise(command))
        packages = options["--packages"].split(",")
        assert KAFKA_CONNECTOR in packages and set(packages) <= {KAFKA_CONNECTOR, HADOOP_CLOUD}
        assert command[-2:] == ["--config", "replmon.yaml"]
        assert command[-3].endswith("replmon/cli/submit.py") or "replmon.cli.submit" in command[-3]

    # the example of `replmon package`'s output is the command it prints, but for the paths of this machine
    printed = submit_command(Path("dist") / "replmon-code-0123456789abcdef.zip")
    example = commands[0]
    assert len(example) == len(printed), example
    for doc_word, word in zip(example, printed, strict=True):
        if word.endswith(f"#{ARCHIVE_ALIAS}"):
            assert re.fullmatch(rf"file:///\S+/replmon-code-[0-9a-f]{{16}}\.zip#{ARCHIVE_ALIAS}", doc_word), doc_word
        elif word == str(Path(submit_module.__file__).resolve()):
            assert doc_word.startswith("/") and doc_word.endswith("/site-packages/replmon/cli/submit.py"), doc_word
        else:
            assert doc_word == word

    yarn = commands[1]
    text = " ".join(yarn)
    assert "--master yarn --deploy-mode cluster" in text and "--files replmon.yaml" in text
    archive = next(yarn[i + 1] for i, w in enumerate(yarn) if w == "--archives")
    alias = archive.split("#")[1]
    for setting in ("spark.yarn.appMasterEnv.PYSPARK_PYTHON", "spark.executorEnv.PYSPARK_PYTHON"):
        assert f"{setting}=./{alias}/bin/python" in yarn


def test_the_docs_kubernetes_steps_use_the_manifest_and_the_image() -> None:
    objects = manifest()
    commands = shell_commands()
    build = next(c for c in commands if c[:2] == ["docker", "build"])
    assert build[build.index("-t") + 1] == objects["SparkApplication"]["spec"]["image"] and build[-1] == "."
    apply = next(c for c in commands if c[:2] == ["kubectl", "apply"])
    assert (ROOT / apply[apply.index("-f") + 1]) == MANIFEST
    namespace = objects["SparkApplication"]["metadata"]["namespace"]
    assert ["kubectl", "create", "namespace", namespace] in commands
    scrape = next(yaml.safe_load(b) for b in code_blocks("yaml") if "scrape_configs" in b)
    (job,) = scrape["scrape_configs"]
    assert job["job_name"] == "replmon-stream"  # the job name of conf/prometheus (alerts and dashboards)
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == [namespace]
    assert job["relabel_configs"][0]["regex"] == objects["Service"]["metadata"]["name"]


def test_the_docs_files_and_sections_exist(tmp_path: Path) -> None:
    text = doc_text()
    for path in re.findall(r"`((?:deploy|docs|conf|tests|replmon|streaming)/[\w./-]+)`", text):
        assert (ROOT / path).exists(), path
    headings = {re.sub(r"[^\w -]", "", h).strip().lower().replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", text, re.M)}
    for anchor in re.findall(r"\]\(#([\w-]+)\)", text):
        assert anchor in headings, anchor
    # replmon/core/config.py names these sections
    assert {"state-parallelism", "changing-the-state-parallelism", "checkpoint-storage"} <= headings
    examples = [b for b in code_blocks("yaml") if b.lstrip().startswith("stream:")]
    assert examples
    for block in examples:  # the doc's configuration examples are valid configurations
        (tmp_path / "replmon.yaml").write_text(block)
        load_config(tmp_path / "replmon.yaml", env={})
