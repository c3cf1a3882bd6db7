"""Where replmon keeps its cache (Kafka and Spark artifacts) and its state (local clusters), and where it downloads
artifacts from."""

from __future__ import annotations

import os
from pathlib import Path

MAVEN_REPOSITORY_ENV = "REPLMON_MAVEN_REPOSITORY"
"""Set to a Maven repository URL (a mirror of Maven Central) to download Kafka and Spark's Kafka connector from
there instead."""


def cache_dir() -> Path:
    """Downloaded artifacts. REPLMON_CACHE_DIR, else $XDG_CACHE_HOME/replmon, else ~/.cache/replmon."""
    env = os.environ.get("REPLMON_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "replmon"


def state_dir() -> Path:
    """Local clusters and job checkpoints. REPLMON_STATE_DIR, else $XDG_STATE_HOME/replmon."""
    env = os.environ.get("REPLMON_STATE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "replmon"


def replace_file(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: ``text`` goes to a ``.tmp`` beside it, renamed over it (a reader, or a
    crash mid-write, sees the old file or the new one, never half of one)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
