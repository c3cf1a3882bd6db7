"""``replmon package``: replmon's code for Spark executors, and the spark-submit command that ships it."""

from __future__ import annotations

import shlex
from pathlib import Path

from replmon.cli import submit
from replmon.core.errors import ReplmonError
from streaming import code_archive
from streaming.session import KAFKA_CONNECTOR


def submit_command(archive: Path, config: str = "replmon.yaml") -> list[str]:
    """The spark-submit command line of the job, shipping ``archive`` (the master comes after ``spark-submit``)."""
    return ["spark-submit", "--packages", KAFKA_CONNECTOR,
            "--archives", f"{archive.resolve().as_uri()}#{code_archive.ARCHIVE_ALIAS}",
            "--conf", f"spark.executorEnv.PYTHONPATH={code_archive.ARCHIVE_ALIAS}",
            str(Path(submit.__file__).resolve()), "--config", config]


def package(output: Path) -> int:
    """Build the code archive in ``output`` (made if missing) and print its path and the spark-submit command; a
    directory that cannot be made or written (a file there, no permission) is one clear error."""
    try:
        archive = code_archive.build(output.resolve())
    except OSError as exc:
        raise ReplmonError(f"cannot write the package to {output}: {exc.strerror or exc}") from None
    print(archive)
    print(shlex.join(submit_command(archive)))
    return 0
