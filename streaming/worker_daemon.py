"""Spark's Python worker daemon for the job (``spark.python.daemon.module``): ``pyspark.daemon``, with imports
from zip archives turned off in the daemon and in the workers it forks, and what each task leaves alive frozen
out of the garbage collector's walks (:func:`frozen_before_each`).

Spark puts archives on its Python workers' import path: pyspark.zip, py4j's zip and the spark-core jar (their
PYTHONPATH), and, with ``spark.jars.packages``, every resolved jar (the Kafka connector's) among each task's
Python includes. PySpark's worker calls ``importlib.invalidate_caches()`` at the start of every task, and on
Python 3.11 that re-reads the directory of every archive an import has searched (about 10,000 entries): 0.3-0.5 s
of CPU per task, and the state query runs ``spark.sql.shuffle.partitions`` tasks per micro-batch, empty or not
(docs/benchmarks.md, "Streaming job"). The workers run the project's venv, where pyspark, py4j and replmon are
installed, so no archive holds anything they import. (The archives also put pyspark.zip ahead of the installed
pyspark: every daemon start compiled pyspark from the zip's sources.)"""

from __future__ import annotations

import gc
import socket
import sys
import zipimport
from collections.abc import Callable


def without_archives() -> None:
    """No import searches a zip archive from now on (a path entry that is an archive is skipped)."""
    sys.path_hooks[:] = [hook for hook in sys.path_hooks if hook is not zipimport.zipimporter]
    for entry, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter):
            del sys.path_importer_cache[entry]


Task = Callable[[socket.socket, bool], int]


def frozen_before_each(task: Task) -> Task:
    """``task`` (pyspark.daemon's ``worker``: one task of a reused worker), after ``gc.freeze()``: what the tasks
    before left alive (modules, their caches) goes to the collector's permanent generation.

    PySpark's daemon runs a full ``gc.collect()`` in a reused worker after each task. A full collection walks
    every object the collector tracks, and a worker holds pyspark, pandas, pyarrow, pydantic and the job's
    modules: ~85,000 objects, 55-70 ms per collection (docs/benchmarks.md), after every task of every micro-batch.
    py-spy of the Python workers of a small stateful query found 59% of their busy time in that collection;
    frozen, their CPU per micro-batch halved (docs/benchmarks.md, "Streaming job"). Frozen objects are not
    walked; reference counting still frees them (only a reference cycle among them, once dropped, would stay).
    The daemon's collection after the previous task has taken that task's garbage before the freeze, so each
    task is collected once, over what it created."""
    def run(sock: socket.socket, authenticated: bool) -> int:
        gc.freeze()
        return task(sock, authenticated)

    return run


if __name__ == "__main__":
    without_archives()
    from pyspark import daemon

    daemon.worker = frozen_before_each(daemon.worker)  # looked up by daemon.manager at each task
    daemon.manager()
