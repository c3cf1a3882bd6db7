"""Where the job keeps its checkpoint and history: a local directory or a Hadoop-compatible filesystem URI.

One spelling per place: a local directory is an absolute path (``~`` expanded, a relative one taken from the
working directory, ``file://`` URIs too), anything else stays the URI it is (``hdfs://namenode:8020/replmon``,
``s3a://bucket/replmon``, ``abfss://container@account.dfs.core.windows.net/replmon``, ``gs://bucket/replmon``).
Spark would resolve a path without a scheme against ``fs.defaultFS``, which on a Hadoop cluster is HDFS: the job
hands Spark :func:`spark_uri`, so a path in replmon's configuration always means the driver's local disk, and
everything the job keeps beside its checkpoint goes where the checkpoint goes (streaming.storage).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")

REFUSED_SCHEMES = {
    "s3": "s3a:// (Hadoop's S3A connector; s3:// is EMR's own filesystem or nothing)",
    "s3n": "s3a:// (s3n was removed from Hadoop)",
    "http": "a Hadoop filesystem URI: checkpoints need rename and listing, HTTP has neither",
    "https": "a Hadoop filesystem URI: checkpoints need rename and listing, HTTP has neither",
}
"""Schemes that look plausible and cannot hold a checkpoint, with what to use instead."""

OBJECT_STORE_SCHEMES = frozenset({"s3a", "gs", "abfs", "abfss", "wasb", "wasbs", "oss", "cos", "cosn", "obs"})
"""Stores whose rename copies objects (not atomic): Spark's checkpoint files go there through an abortable stream
instead (streaming.session)."""


def scheme(location: str) -> str | None:
    """The URI scheme, lower case; None for a local path."""
    match = _SCHEME.match(location)
    return match.group(1).lower() if match else None


def normalize(value: str | Path) -> str:
    """A location as the configuration keeps it (raises ValueError with what to write instead)."""
    text = str(value).strip()
    if not text:
        raise ValueError("an empty location: give a local directory or a Hadoop filesystem URI")
    found = scheme(text)
    if found is None:
        return str(Path(text).expanduser().absolute())
    if found in REFUSED_SCHEMES:
        raise ValueError(f"{text!r}: use {REFUSED_SCHEMES[found]}")
    parts = urlsplit(text)
    if found == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"{text!r}: a file:// URI names no host (file:///path)")
        return str(Path(parts.path or "/").absolute())
    if parts.query or parts.fragment:
        raise ValueError(f"{text!r}: a location takes no query or fragment")
    path = re.sub("/+", "/", parts.path).rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path or '/'}"


def is_local(location: str) -> bool:
    return scheme(location) is None


def join(location: str, *parts: str) -> str:
    """``location`` with ``parts`` appended as path segments."""
    if is_local(location):
        return str(Path(location).joinpath(*parts))
    return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts)])


def spark_uri(location: str) -> str:
    """The URI Spark and Hadoop get: ``file:`` for a local directory, so that no ``fs.defaultFS`` reinterprets it."""
    return Path(location).as_uri() if is_local(location) else location


def local_path(location: str) -> Path | None:
    """The directory of a local location; None for a URI."""
    return Path(location) if is_local(location) else None
