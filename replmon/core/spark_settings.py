"""The Spark settings an operator gives replmon (``stream.spark_master``, ``stream.spark_conf``), read as Spark reads
them, so that a value Spark would refuse, or read otherwise than meant, is one line when the configuration is
loaded, not an error or a traceback once Spark starts (pure: no Spark here)."""

from __future__ import annotations

import os
import re

LOCAL_MASTER = re.compile(r"local\[(?P<threads>[0-9]+|\*)(?:\s*,\s*[0-9]+)?\]")
"""local[N], local[*], local[N,F] and local[*,F] (F: task failures allowed), as Spark's ``SparkMasterRegex`` reads
them (``LOCAL_N_REGEX``, ``LOCAL_N_FAILURES_REGEX``)."""
LOCAL_CLUSTER_MASTER = re.compile(r"local-cluster\[\s*[0-9]+\s*,\s*[0-9]+\s*,\s*[0-9]+\s*]")
"""local-cluster[N,C,M]: N workers of C cores and M MiB on this host (``LOCAL_CLUSTER_REGEX``)."""
MASTER_FORMS = ("local, local[N], local[*], local[N,F], local-cluster[N,C,M], spark://HOST:PORT[,HOST:PORT...], yarn, "
                "k8s://URL")
"""What a master URL may be, as said in an error."""

JVM_SIZE = re.compile(r"[0-9]+[kKmMgGtT]?")
"""A JVM memory size (its -Xmx): spark.driver.memory goes to the driver's JVM as it is written."""
BYTE_SIZE = re.compile(r"[0-9]+(?:[bB]|[kKmMgGtTpP][bB]?)?")
"""A size as Spark reads the other memory settings (JavaUtils.byteStringAs: b, k, kb, m, mb, g, gb, t, tb, p, pb,
any case)."""

COUNTS = ("spark.cores.max", "spark.executor.instances", "spark.executor.cores", "spark.sql.shuffle.partitions",
          "spark.default.parallelism")
"""Settings that are a count of at least 1, which replmon also reads (the state query's tasks)."""
SIZES = {"spark.driver.memory": (JVM_SIZE, "a JVM memory size: a whole number with k, m, g or t (2g, 2048m)"),
         "spark.executor.memory": (BYTE_SIZE, "a size: a whole number with k, m, g or t (2g, 2048m)"),
         "spark.driver.memoryOverhead": (BYTE_SIZE, "a size: a whole number with k, m, g or t (512m)"),
         "spark.executor.memoryOverhead": (BYTE_SIZE, "a size: a whole number with k, m, g or t (512m)")}
"""Memory settings and how Spark reads them."""


def local_threads(master: str) -> int | None:
    """N of a local master (``local``: 1, ``local[*]``: this host's cores); None for any other master."""
    if master == "local":
        return 1
    local = LOCAL_MASTER.fullmatch(master)
    if local is None:
        return None
    threads = local["threads"]
    return os.cpu_count() or 1 if threads == "*" else int(threads)


def master_problem(master: str) -> str | None:
    """Why Spark would not take ``master`` as its master URL; None when it would or when it is for a cluster manager
    Spark finds at its start (yarn, k8s://, a plug-in). A local or standalone master is read here as Spark reads it:
    a typo there would otherwise start a job on something else, or fail once Spark is up."""
    unread = f"{master!r} is not a master URL Spark reads ({MASTER_FORMS})"
    if master == "local" or LOCAL_CLUSTER_MASTER.fullmatch(master):
        return None
    if master.startswith("local"):
        if local_threads(master) == 0:
            return f"{master!r} runs no task: local[N] needs N of at least 1"
        return None if LOCAL_MASTER.fullmatch(master) else unread
    if master.startswith("spark:"):
        if not master.startswith("spark://"):
            return unread
        for server in master.removeprefix("spark://").split(","):
            host, _, port = server.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                return unread
        return None
    if not master.strip() or any(c.isspace() for c in master):
        return f"{master!r} is not a master URL ({MASTER_FORMS})"
    return None


def setting_value(value: object) -> str:
    """A Spark setting's value as Spark reads it from a string: a YAML boolean is Spark's true/false, a number its
    digits; anything but a string, a number or a boolean is refused."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise ValueError(f"a Spark setting's value is a string, a number or true/false, not {type(value).__name__}")


def setting_problem(key: str, value: str) -> str | None:
    """Why Spark would refuse ``value`` for ``key``, or replmon could not read it; None when it is fine or not one
    replmon knows."""
    if key == "spark.master":
        return master_problem(value)
    if key in COUNTS:
        return None if value.isdigit() and int(value) >= 1 else f"{value!r} is not a count of at least 1"
    if key in SIZES:
        pattern, what = SIZES[key]
        return None if pattern.fullmatch(value) else f"{value!r} is not {what}"
    return None
