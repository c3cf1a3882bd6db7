"""Spark's Python worker daemon for the job (``spark.python.daemon.module``): ``pyspark.daemon``, with imports
from zip archives turned off in the daemon and in the workers it forks.

Spark puts archives on its Python workers' import path: pyspark.zip, py4j's zip and the spark-core jar (their
PYTHONPATH), and, with ``spark.jars.packages``, every resolved jar (the Kafka connector's) among each task's
Python includes. PySpark's worker calls ``importlib.invalidate_caches()`` at the start of every task, and on
Python 3.11 that re-reads the directory of every archive an import has searched (about 10,000 entries): 0.3-0.5 s
of CPU per task, and the state query runs ``spark.sql.shuffle.partitions`` tasks per micro-batch, empty or not
(docs/benchmarks.md, "Streaming job"). The workers run the project's venv, where pyspark, py4j and replmon are
installed, so no archive holds anything they import. (The archives also put pyspark.zip ahead of the installed
pyspark: every daemon start compiled pyspark from the zip's sources.)"""

from __future__ import annotations

import sys
import zipimport


def without_archives() -> None:
    """No import searches a zip archive from now on (a path entry that is an archive is skipped)."""
    sys.path_hooks[:] = [hook for hook in sys.path_hooks if hook is not zipimport.zipimporter]
    for entry, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter):
            del sys.path_importer_cache[entry]


if __name__ == "__main__":
    without_archives()
    from pyspark import daemon

    daemon.manager()
