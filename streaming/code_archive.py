"""replmon's code for Spark executors that do not have it installed: a zip of the packages the executors import
(:data:`SHIPPED`), shipped through ``spark.archives`` and unpacked by Spark beside each executor under
:data:`ARCHIVE_ALIAS`, which the executors' Python path names (``spark.executorEnv.PYTHONPATH``).

Unpacked, not imported from the zip: the Python workers' daemon (streaming.worker_daemon, itself shipped this
way) turns imports from zip archives off, and it must be importable when the executor starts it, before any task
could add a file to the path. The executors' Python supplies the dependencies (pyspark, pydantic, pyarrow, ...):
the venv or image the platform runs Spark's Python with (``spark.pyspark.python``)."""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import replmon

ARCHIVE_ALIAS = "replmon-code"
"""The directory each executor unpacks the archive into (the ``#alias`` of spark.archives), relative to its
working directory, which is its Python workers' working directory too."""
SHIPPED = ("replmon/__init__.py", "replmon/core", "replmon/contracts", "streaming")
"""What the executors import, relative to the installation's root: the job's stage and what it stands on (not the
collectors, the test bed or the CLI, which they never load)."""
_SKIPPED_DIRS = {"__pycache__"}
_SKIPPED_SUFFIXES = {".pyc", ".pyo"}


def _files() -> Iterator[tuple[Path, str]]:
    """(file, its name in the archive) for everything :data:`SHIPPED`, sorted."""
    root = Path(replmon.__file__).parent.parent  # where the installation's packages sit (site-packages, a checkout)
    assert (root / "streaming" / "__init__.py").is_file(), f"streaming is not installed beside replmon in {root}"
    for entry in SHIPPED:
        top = root / entry
        for path in [top] if top.is_file() else sorted(top.rglob("*")):
            relative = path.relative_to(root)
            if path.is_file() and path.suffix not in _SKIPPED_SUFFIXES and not _SKIPPED_DIRS & set(relative.parts):
                yield path, relative.as_posix()


def build(directory: Path) -> Path:
    """The archive of the running installation's packages in ``directory``, named after its content's digest
    (built once per content; an unchanged installation reuses it)."""
    files = list(_files())
    digest = hashlib.sha256()
    for path, name in files:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    target = directory / f"replmon-code-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, name in files:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))  # reproducible: same content, same bytes
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes())
    partial.replace(target)
    return target
