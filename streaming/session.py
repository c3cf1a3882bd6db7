"""The Spark session of the job: Spark's official Kafka source, RocksDB state store, the checkpoint manager its
storage needs, and the project's own Python for the Python workers; in local mode by default, on any master
(``stream.spark_master``), and under spark-submit, whose master, packages and --conf it defers to."""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from replmon.core import locations
from replmon.core.config import StreamConfig
from replmon.core.errors import ReplmonError
from replmon.core.paths import MAVEN_REPOSITORY_ENV, cache_dir
from replmon.core.spark_settings import local_threads
from streaming import code_archive, pyspark_hooks
from streaming.code_archive import ARCHIVE_ALIAS

log = logging.getLogger(__name__)

SPARK_VERSION = pyspark_hooks.PYSPARK_VERSION
"""The running PySpark's version, which Spark's own modules below must match (a connector built for another Spark
fails on its internal API): the pinned one (pyproject.toml), unless a platform's PySpark runs the job."""
KAFKA_CONNECTOR = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}"
REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|jaas|keystore[.]key"
"""Spark's default (secret|password|token|access.key) plus ``jaas`` (``kafka.sasl.jaas.config``) and the inline
private key of a client certificate (``kafka.ssl.keystore.key``)."""
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def spark_release(version: str) -> tuple[int, int]:
    """A Spark version's major and minor release ("4.2.0" -> (4, 2))."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def checkpointing_package(spark_version: str) -> str:
    """The package of Spark's checkpoint file managers in that Spark: Spark 4.1 moved them into a sub-package
    (SPARK-52787), and a class named in the old one is not found there."""
    base = "org.apache.spark.sql.execution.streaming"
    return f"{base}.checkpointing" if spark_release(spark_version) >= (4, 1) else base


CHECKPOINTING = checkpointing_package(SPARK_VERSION)
"""The running Spark's (:func:`checkpointing_package`)."""
FILESYSTEM_CHECKPOINT_MANAGER = f"{CHECKPOINTING}.FileSystemBasedCheckpointFileManager"

CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
ABORTABLE_CHECKPOINT_MANAGER = "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"
HADOOP_CLOUD = f"org.apache.spark:spark-hadoop-cloud_2.13:{SPARK_VERSION}"
"""Spark's cloud module: the checkpoint manager for object stores."""

STATE_CONF = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    # a commit writes the batch's changes, not a snapshot of the store (snapshots in the background); Spark
    # reads a checkpoint written either way, so it applies to existing checkpoints too
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # A local checkpoint (the default). Spark's default manager renames a checkpoint file through Hadoop's
    # FileContext, which on the local filesystem starts a `readlink` process (and more) per rename: the offsets
    # log, the commit log and each state task's changelog, every micro-batch, ~40 ms apiece on a busy JVM.
    # Hadoop's FileSystem.rename is a plain rename(2) there, as atomic, and the files are the same: a checkpoint
    # written by either manager is read by the other. Other stores: checkpoint_manager_conf.
    CHECKPOINT_MANAGER: FILESYSTEM_CHECKPOINT_MANAGER,
}
"""How the session keeps the query's state and checkpoint (also the tests' own sessions)."""


def checkpoint_manager_conf(checkpoint_dir: str) -> dict[str, str]:
    """The checkpoint file manager the checkpoint's store needs. Local: FileSystem renames (above). HDFS and other
    filesystems with an atomic rename: Spark's default, FileContext's rename with overwrite (FileSystem.rename on
    HDFS refuses to replace a file: a batch's retried commit would fail). Object stores, where a rename copies:
    Spark's abortable-stream manager, which writes each file in place and never shows a partial one."""
    found = locations.scheme(checkpoint_dir)
    if found is None:
        return {CHECKPOINT_MANAGER: FILESYSTEM_CHECKPOINT_MANAGER}
    if found in locations.OBJECT_STORE_SCHEMES:
        return {CHECKPOINT_MANAGER: ABORTABLE_CHECKPOINT_MANAGER}
    return {}


PYTHON_CONF = {
    "spark.python.worker.reuse": "true",
    # pyspark.daemon without imports from zip archives, when the PySpark version is the one its hook is written
    # for: streaming/worker_daemon.py (0.3-0.5 s of CPU per task)
    **pyspark_hooks.daemon_conf(),
    # PySpark's DataFrame debugging records the Python call site of every Column function in the JVM: 5 Py4J
    # round trips per call
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}
"""How the session runs Python, in the driver and in the workers (also the tests' own sessions)."""


INTERPRETED_PROJECTIONS = {"spark.sql.codegen.factoryMode": "NO_CODEGEN"}
"""Projections, predicates and orderings evaluated by Spark's interpreter instead of generated Java classes
(whole-stage code generation is untouched; the setting is internal to Spark, and the operator's
``stream.spark_conf`` wins, e.g. ``FALLBACK``, Spark's default). Spark generates a projection's source in every
task before it finds the class compiled; the job's projections are few and small, and generating them cost more
than interpreting them: the job's capacity 51,903 samples/s interpreted against 45,779 with generated classes,
its stateless baseline 252,073 against 225,720 (two runs of bench_stream.py, back to back;
docs/benchmarks.md, "Streaming job")."""


def connector_jars(jars_dir: Path) -> list[str]:
    """The jars of an air-gapped site's connector directory (spark-sql-kafka-0-10 and its dependencies)."""
    jars = sorted(str(p) for p in Path(jars_dir).expanduser().glob("*.jar"))
    if not any("spark-sql-kafka-0-10" in Path(j).name for j in jars):
        raise ReplmonError(f"stream.kafka_jars_dir {jars_dir} holds no spark-sql-kafka-0-10 jar")
    return jars


def ivy_settings(cache: Path, repository: str | None = None) -> str:
    """Ivy settings for spark.jars.packages: Maven Central (or a mirror) only, cached under ``cache``.

    Spark's default chain also asks ~/.m2, where a POM without its jar (left by Maven) fails the resolution."""
    root = repository or "https://repo1.maven.org/maven2/"
    return (
        "<ivysettings>\n"
        '  <settings defaultResolver="central"/>\n'
        f'  <caches defaultCacheDir="{cache / "cache"}"/>\n'
        f'  <resolvers><ibiblio name="central" m2compatible="true" root="{root}"/></resolvers>\n'
        "</ivysettings>\n"
    )


def ivy_dir() -> Path:
    """Where Spark's Ivy keeps what it downloads (``cache``) and retrieves (``jars``) for the job: in replmon's
    cache."""
    return cache_dir() / "ivy"


def ivy_conf(ivy: Path, packages: Sequence[str]) -> dict[str, str]:
    """The settings that have Spark resolve ``packages`` through Ivy (:func:`ivy_settings`), cached in ``ivy``."""
    ivy.mkdir(parents=True, exist_ok=True)
    settings = ivy / "ivysettings.xml"
    settings.write_text(ivy_settings(ivy, os.environ.get(MAVEN_REPOSITORY_ENV)))
    return {"spark.jars.ivy": str(ivy), "spark.jars.ivySettings": str(settings),
            "spark.jars.packages": ",".join(packages)}


RESOLVED = "resolved.json"
"""In the Ivy cache: the packages Spark resolved there and the jars it resolved them to (:func:`remember_jars`)."""


def resolved_jars(ivy: Path, packages: Sequence[str], bundled: frozenset[str] = frozenset()) -> list[str] | None:
    """The jars Spark resolved ``packages`` to at an earlier start, without those named in ``bundled`` (Spark's own
    jars); None when these packages were not resolved in ``ivy`` yet or one of their jars is gone.

    Spark resolves packages through Ivy at every start, from its cache: 2-3 s of the session's start, and for a
    Python application it also copies each jar among the session's files and puts it on the Python workers'
    path. The resolved jars given as ``spark.jars`` are the same classes without either; a jar of the same name
    as one of Spark's own (Hadoop's client, lz4, snappy: dependencies of the Kafka connector that Spark bundles)
    is never used, Spark's own class path being searched first (docs/benchmarks.md, "Job start-up")."""
    try:
        manifest = json.loads((ivy / RESOLVED).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("packages") != list(packages):
        return None
    jars = [str(j) for j in manifest.get("jars") or ()]
    if not jars or not all(Path(j).is_file() for j in jars):
        return None
    return [j for j in jars if _artifact_file(j) not in bundled]


def remember_jars(ivy: Path, packages: Sequence[str], jars: str) -> None:
    """What Spark resolved ``packages`` to, for the next start (:func:`resolved_jars`): the jars among ``jars``
    (its ``spark.jars``, URIs or paths, the operator's own too) that Ivy retrieved into ``ivy``. Replaced at once:
    jobs starting together read either the old or the new list. A cache it cannot write is only logged: the next
    start resolves again."""
    try:
        paths = [locations.normalize(j.strip()) for j in jars.split(",") if j.strip()]
    except ValueError:  # not a list of files: resolved again at the next start
        return
    retrieved = [p for p in paths if locations.is_local(p) and Path(p).is_relative_to(ivy.absolute())]
    if not retrieved:
        return
    written = None
    try:
        with tempfile.NamedTemporaryFile("w", dir=ivy, prefix=f".{RESOLVED}.", delete=False) as out:
            written = Path(out.name)
            json.dump({"packages": list(packages), "jars": retrieved}, out)
        os.replace(written, ivy / RESOLVED)
    except OSError as exc:
        if written is not None:
            written.unlink(missing_ok=True)
        log.warning("cannot remember the Kafka connector's jars in %s (%s): the next start resolves them again",
                    ivy, exc)


def bundled_jars() -> frozenset[str]:
    """The jar files of the Spark this process runs (SPARK_HOME, else the pyspark package's)."""
    import pyspark

    home = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
    return frozenset(p.name for p in (home / "jars").glob("*.jar"))


def _artifact_file(jar: str) -> str:
    """The file name Spark's own distribution gives the jar Ivy retrieved as ``jar`` (Spark's Ivy pattern names a
    file ``organisation_artifact-revision.jar``)."""
    return Path(jar).name.split("_", 1)[-1]


def state_parallelism(cfg: StreamConfig, conf: dict[str, str]) -> int | None:
    """The state query's tasks for a new checkpoint (``stream.state_parallelism``), else the cores the job gets as
    far as its settings tell (``conf``: the settings the session starts with); None: Spark's default parallelism,
    known once the session runs. Each task costs a fixed ~0.3 s per micro-batch (its state store's load and
    commit, its Python worker's setup): more tasks than cores run in waves (4 on local[2] took two)."""
    if cfg.state_parallelism is not None:
        return cfg.state_parallelism
    cores = local_threads(conf.get("spark.master", cfg.spark_master))
    if cores is not None:
        return cores
    if "spark.cores.max" in conf:
        return int(conf["spark.cores.max"])
    if "spark.executor.instances" in conf and "spark.executor.cores" in conf:
        return int(conf["spark.executor.instances"]) * int(conf["spark.executor.cores"])
    return None


def spark_conf(cfg: StreamConfig, app_name: str = "replmon", submitted: dict[str, str] | None = None,
               code_archive: str | None = None) -> dict[str, str]:
    """Every setting the job's session gets (pure: tested without Spark). ``submitted``: what spark-submit set
    (its master, packages and --conf), which win over replmon's and are not repeated; ``code_archive``: the
    archive of replmon's code to ship to the executors (off local mode)."""
    given = {**cfg.spark_conf, **(submitted or {})}  # what the operator set, over replmon's
    master = given.get("spark.master", cfg.spark_master)
    cores = local_threads(master)
    conf = {
        "spark.app.name": app_name,
        "spark.master": cfg.spark_master,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",  # the job's log carries replmon's lines and Spark's warnings
        "spark.driver.memory": "2g",
        "spark.sql.session.timeZone": "UTC",
        **{k: v for k, v in STATE_CONF.items() if k != CHECKPOINT_MANAGER},
        **checkpoint_manager_conf(cfg.checkpoint_dir),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        "spark.sql.adaptive.enabled": "false",
        **INTERPRETED_PROJECTIONS,
        **PYTHON_CONF,
        # the Kafka source's options carry the SASL JAAS config (with its password): Spark masks settings and
        # data source options whose key or value matches these wherever it shows them (logs, plans, UI)
        "spark.redaction.regex": REDACTION_REGEX,
        "spark.sql.redaction.options.regex": "(?i)url|" + REDACTION_REGEX.removeprefix("(?i)"),
    }
    if cores is not None:  # local mode, everything on this host: nothing listens beyond loopback
        conf["spark.driver.host"] = conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf["spark.default.parallelism"] = str(cores)
    if cfg.driver_host is not None:
        conf["spark.driver.host"] = cfg.driver_host
    if cfg.driver_bind_address is not None:
        conf["spark.driver.bindAddress"] = cfg.driver_bind_address
    if submitted is None:  # spark-submit resolved the packages already (its --packages/--jars)
        packages = [KAFKA_CONNECTOR]
        if conf.get(CHECKPOINT_MANAGER) == ABORTABLE_CHECKPOINT_MANAGER:
            packages.append(HADOOP_CLOUD)
        if cfg.kafka_jars_dir is not None:
            conf["spark.jars"] = ",".join(connector_jars(cfg.kafka_jars_dir))
        else:
            ivy = ivy_dir()
            jars = resolved_jars(ivy, packages, bundled_jars() if cores is not None else frozenset())
            conf.update({"spark.jars": ",".join(jars)} if jars is not None else ivy_conf(ivy, packages))
    parallelism = state_parallelism(cfg, {**conf, **given})
    if parallelism is not None:
        conf["spark.sql.shuffle.partitions"] = str(parallelism)
    connector = conf.get("spark.jars")
    conf.update(cfg.spark_conf)
    if connector and cfg.spark_conf.get("spark.jars"):  # the operator's jars, and the connector's beside them
        conf["spark.jars"] = f"{cfg.spark_conf['spark.jars']},{connector}"
    archives = given.get("spark.archives", "")
    if code_archive is not None and cores is None and f"#{ARCHIVE_ALIAS}" not in archives:  # not shipped by hand
        ship = f"{locations.spark_uri(locations.normalize(code_archive))}#{ARCHIVE_ALIAS}"
        conf["spark.archives"] = f"{archives},{ship}" if archives else ship
        path = given.get("spark.executorEnv.PYTHONPATH")
        conf["spark.executorEnv.PYTHONPATH"] = f"{ARCHIVE_ALIAS}:{path}" if path else ARCHIVE_ALIAS
    if submitted:
        conf = {k: v for k, v in conf.items()
                if k not in submitted or k in ("spark.archives", "spark.executorEnv.PYTHONPATH")}
    return conf


def submitted_conf() -> dict[str, str] | None:
    """The settings spark-submit gave the JVM when this process runs under it (spark-submit started the JVM and
    handed its gateway over: PYSPARK_GATEWAY_PORT); None otherwise."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())


STOPPED_CONTEXT = "Cannot call methods on a stopped SparkContext"
"""What the session's creation raises when Spark stopped the context it was starting: a standalone master that did
not take the application ("All masters are unresponsive" in Spark's log), or a cluster manager that refused it."""


def start_failure(error: BaseException) -> str:
    """Why the session did not start, in one line: the innermost Java exception's message (a Py4J error's first line
    names only the constructor that failed), or PySpark's own first line when no JVM answered."""
    lines = pyspark_hooks.error_lines(error)
    reason = lines[-1] if len(lines) > 1 else lines[0].split(": ", 1)[-1]
    if STOPPED_CONTEXT in reason:
        return ("Spark stopped the context it was starting: the master did not take the application (an "
                "unreachable master: \"All masters are unresponsive\" in Spark's log above; stream.spark_master)")
    return reason


def get_session(cfg: StreamConfig, app_name: str = "replmon") -> SparkSession:
    # Spark's Python workers run the interpreter of this process (the project's venv) unless the platform names
    # another (PYSPARK_PYTHON, spark.pyspark.python)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    submitted = submitted_conf()
    archive = None
    if cfg.code_archive == "auto":
        archive = str(code_archive.build(cache_dir() / "spark"))
    elif cfg.code_archive != "none":
        archive = cfg.code_archive
    conf = spark_conf(cfg, app_name, submitted, archive)
    master = {**conf, **(submitted or {})}.get("spark.master", cfg.spark_master)
    local_paths = [p for p in (cfg.checkpoint_dir, cfg.history_dir) if locations.is_local(p)]
    if local_threads(master) is None and local_paths:
        log.warning("%s is a local path, but the executors run off this host (master %s): each must see it at the "
                    "same path (a shared mount), or give a Hadoop filesystem URI (hdfs://, s3a://, ...; "
                    "docs/deploy.md)", " and ".join(local_paths), master)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # the JVM did not start, the connector did not resolve, the master did not answer
        raise ReplmonError(f"cannot start Spark (master {master}): {start_failure(exc)}") from exc
    spark.sparkContext.setLogLevel("WARN")
    if "spark.jars.ivy" in conf and "spark.jars.packages" in conf:  # resolved by Ivy now: the next start names
        remember_jars(Path(conf["spark.jars.ivy"]), conf["spark.jars.packages"].split(","),  # the jars instead
                      spark.sparkContext.getConf().get("spark.jars", ""))
    if "spark.sql.shuffle.partitions" not in {**conf, **(submitted or {})}:  # the cores the job has now
        spark.conf.set("spark.sql.shuffle.partitions", str(spark.sparkContext.defaultParallelism))
    return spark
