"""Assemble Apache Kafka from Maven Central into a cached classpath, and find a Java runtime for it.

The first start downloads the jars with Maven (``dependency:copy-dependencies`` on the bundled POM); later
starts use the cache and need no network.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from replmon.core.errors import ReplmonError
from replmon.core.paths import MAVEN_REPOSITORY_ENV, cache_dir

KAFKA_VERSION = "4.4.0"
"""The newest Apache Kafka 4.x whose whole dependency tree, kafka-tools included, resolves from Maven Central."""

MIN_JAVA = 17


def java_executable() -> str:
    """The ``java`` to run Kafka with: $JAVA_HOME/bin/java, else the one on PATH; it must be Java 17+."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise ReplmonError(
            f"Java not found: the local Kafka cluster needs Java {MIN_JAVA}+ "
            "(apt-get install openjdk-17-jre-headless, or set JAVA_HOME)"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    major = parse_java_major(out.stderr + out.stdout)
    if major is None or major < MIN_JAVA:
        raise ReplmonError(f"{java} is Java {major or 'of unknown version'}; Kafka {KAFKA_VERSION} needs {MIN_JAVA}+")
    return java


def parse_java_major(version_output: str) -> int | None:
    """Major version from ``java -version`` output ('1.8.0_392' -> 8, '17.0.15' -> 17)."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    """The directory of jars that runs Kafka ``version``, downloading it on first use."""
    return maven_libs(cache_dir() / f"kafka-{version}", "replmon.testbed.localcluster", f"Apache Kafka {version}",
                      "kafka_2.13-*.jar", f"-Dkafka.version={version}")


def maven_libs(root: Path, pom_package: str, what: str, probe: str, *maven_args: str) -> Path:
    """``root``/libs: the runtime classpath of the ``pom.xml`` bundled in package ``pom_package``, copied there by
    Maven (``dependency:copy-dependencies``, with ``maven_args``) on first use and read from the cache after that.
    A cache counts when its ``complete`` marker is there and a jar matches the glob ``probe``; an interrupted
    download leaves neither."""
    libs = root / "libs"
    if (root / "complete").exists() and any(libs.glob(probe)):
        return libs
    mvn = shutil.which("mvn")
    if not mvn:
        raise ReplmonError(
            f"Maven (mvn) not found and {what} is not cached in {root}: install Maven 3.8+ (apt-get install maven)"
        )
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix="download-") as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(resources.files(pom_package).joinpath("pom.xml").read_text())
        out_dir = Path(tmp) / "libs"
        _maven(mvn, Path(tmp), what, root, "-f", str(pom), "dependency:copy-dependencies", *maven_args,
               f"-DoutputDirectory={out_dir}", "-DincludeScope=runtime")
        if libs.exists():
            shutil.rmtree(libs)
        out_dir.rename(libs)
    (root / "complete").write_text(what + "\n")
    return libs


def kafka_tools_jar(version: str = KAFKA_VERSION) -> Path:
    """Kafka's tools jar (``kafka-dump-log``'s DumpLogSegments lives there, not in the broker's jars), fetched from
    Maven once into the Kafka cache beside the libs; its dependencies are the broker's (:func:`kafka_libs`)."""
    root = cache_dir() / f"kafka-{version}" / "tools"
    jar = root / f"kafka-tools-{version}.jar"
    if jar.exists():
        return jar
    mvn = shutil.which("mvn")
    if not mvn:
        raise ReplmonError(f"Maven (mvn) not found and kafka-tools {version} is not cached in {root}")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix="download-") as tmp:
        _maven(mvn, Path(tmp), f"kafka-tools {version}", root,
               "dependency:copy", f"-Dartifact=org.apache.kafka:kafka-tools:{version}", f"-DoutputDirectory={tmp}")
        os.replace(Path(tmp) / jar.name, jar)
    return jar


def _maven(mvn: str, tmp: Path, what: str, cache: Path, *args: str) -> None:
    """Run Maven in ``tmp`` (through the mirror of $REPLMON_MAVEN_REPOSITORY when set); a failure says why."""
    cmd = [mvn, "-B", "-q", *args]
    mirror = os.environ.get(MAVEN_REPOSITORY_ENV)
    if mirror:
        settings = tmp / "settings.xml"
        settings.write_text(maven_mirror_settings(mirror))
        cmd[1:1] = ["-s", str(settings)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=tmp)
    if proc.returncode != 0:
        raise ReplmonError(
            f"cannot download {what} from {mirror or 'Maven Central'} and nothing is cached in {cache}: "
            f"{maven_failure_reason(proc.stdout + proc.stderr)} "
            f"(check network access, or set {MAVEN_REPOSITORY_ENV} to a reachable mirror)"
        )


def maven_mirror_settings(url: str) -> str:
    """A Maven settings.xml that sends every repository request to ``url``."""
    return (
        "<settings><mirrors><mirror><id>replmon-mirror</id><mirrorOf>*</mirrorOf>"
        f"<url>{url}</url></mirror></mirrors></settings>\n"
    )


def maven_failure_reason(output: str) -> str:
    """The most telling line of a failed Maven run."""
    lines = [line.strip() for line in output.splitlines() if "[ERROR]" in line and line.strip() != "[ERROR]"]
    for line in lines:
        if "Could not" in line or "resolve" in line or "transfer" in line:
            return _shorten(line.replace("[ERROR]", "").strip())
    return _shorten(lines[0].replace("[ERROR]", "").strip()) if lines else "Maven failed"


def _shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
